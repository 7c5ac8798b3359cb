package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable writes the pass/fail/skip table and the totals.
func (r *Report) WriteTable(w io.Writer, dryRun bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if r.Driver != "" && !dryRun {
		fmt.Fprintf(tw, "driver: %s %s\n\n", r.Driver, r.Version)
	}
	fmt.Fprintln(tw, "CHECK\tRESULT\tTIME\tDETAIL")
	for _, c := range r.Results {
		detail := c.Detail
		if dryRun {
			detail = strings.Join(c.Calls, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.ID, c.Status, c.Duration.Round(1e6), detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range r.Cleanup {
		fmt.Fprintf(w, "clean-up: %s\n", c)
	}
	if len(r.Unchecked) > 0 && !dryRun {
		fmt.Fprintf(w, "\nnot checked, for want of a hook (these rules are unproven for this driver; --require-hooks fails such a run):\n  %s\n", strings.Join(r.Unchecked, "\n  "))
	}
	if dryRun {
		n := 0
		for _, c := range r.Results {
			n += len(c.Calls)
		}
		_, err := fmt.Fprintf(w, "\ndry run: %d checks would make %d calls; none was made\n", len(r.Results), n)
		return err
	}
	p, f, s := r.Counts()
	var failed []string
	for _, c := range r.Results {
		if c.Status == Fail {
			failed = append(failed, c.ID+" ("+c.Spec+")")
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(w, "\nfailed:\n  %s\n", strings.Join(failed, "\n  "))
	}
	_, err := fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped\n", p, f, s)
	return err
}

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

type junitSuites struct {
	XMLName xml.Name   `xml:"testsuites"`
	Suites  []junitSet `xml:"testsuite"`
}

type junitSet struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     float64     `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string     `xml:"name,attr"`
	Classname string     `xml:"classname,attr"`
	Time      float64    `xml:"time,attr"`
	Failure   *junitText `xml:"failure,omitempty"`
	Skipped   *junitText `xml:"skipped,omitempty"`
	SystemOut string     `xml:"system-out,omitempty"`
}

type junitText struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the report as JUnit XML, one test case per check, its
// class the check's area (identity, replication, fence).
func (r *Report) WriteJUnit(w io.Writer) error {
	set := junitSet{Name: "csi-addons-conformance"}
	if r.Driver != "" {
		set.Name += " " + r.Driver
	}
	for _, c := range r.Results {
		area, _, _ := strings.Cut(c.ID, "/")
		jc := junitCase{Name: c.ID, Classname: "conformance." + area, Time: c.Duration.Seconds(), SystemOut: c.Spec}
		switch c.Status {
		case Fail:
			jc.Failure = &junitText{Message: c.Detail, Text: c.Spec + "\n" + c.Detail}
			set.Failures++
		case Skip, Planned:
			jc.Skipped = &junitText{Message: c.Detail}
			set.Skipped++
		}
		set.Tests++
		set.Time += jc.Time
		set.Cases = append(set.Cases, jc)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSet{set}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
