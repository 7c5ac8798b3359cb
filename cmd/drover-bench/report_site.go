package main

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// siteBound is the site rows' goal: a site failover of 100 plans within
// this ratio of the plain program making the same calls.
const siteBound = 1.15

// storeLabel names a site row's store in the table, with the server's
// version when known; parseSiteRows reads the store back from it.
func storeLabel(r siteRow) string {
	server := "Temporal"
	if r.server != "" {
		server += " " + r.server
	}
	if r.store == storeSQL {
		return server + " on PostgreSQL"
	}
	return server + " dev server on SQLite"
}

// renderSite writes the site rows as Markdown: the table, the stores side
// by side when the run measured both, every run's time of the rows
// measured more than once, and the goal.
func renderSite(o options, rows []siteRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s with `%s`.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), siteCommand(o))
	fmt.Fprintf(&b, "Machine: %s.\n\n", machine())
	b.WriteString("| store | plans | groups per plan | tiers | plans at once | latency | measured | direct | ratio to direct | site-wide RTO | children that do nothing | ratio to direct + them | the design's turns | ratio to direct + turns | the turns carrying the plans' histories | ratio to direct + histories | events per plan | worker peak RSS | Temporal peak RSS |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %v | %s | %s | %.2f | %s | %s | %.2f | %s | %s | %s | %s | %.1f | %d MiB | %d MiB |\n",
			storeLabel(r), r.plans, r.groups, r.tiers, r.atOnce, r.latency, ms(r.measured), ms(r.direct),
			float64(r.measured)/float64(r.direct), ms(r.rto), ms(r.floor), float64(r.measured)/float64(r.direct+r.floor),
			orDash(r.turns, ms(r.turns)), orDash(r.turns, fmt.Sprintf("%.2f", float64(r.measured)/float64(r.direct+r.turns))),
			orDash(r.shaped, ms(r.shaped)), orDash(r.shaped, fmt.Sprintf("%.2f", float64(r.measured)/float64(r.direct+r.shaped))),
			r.eventsPerPlan(), r.workerRSS>>20, r.temporalRSS>>20)
	}
	b.WriteString(storesSideBySide(rows))
	var runs strings.Builder
	for _, r := range rows {
		if len(r.runs) < 2 {
			continue
		}
		if runs.Len() == 0 {
			runs.WriteString("\nRows measured more than once give the run of the median time and the median direct time. Each run's time:\n\n")
		}
		var each []string
		for _, d := range r.runs {
			each = append(each, ms(d))
		}
		fmt.Fprintf(&runs, "- %d plans, %d at once, %s: %s\n", r.plans, r.atOnce, r.store, strings.Join(each, ", "))
	}
	b.WriteString(runs.String())
	b.WriteString(siteTargets(rows))
	return b.String()
}

// orDash is text, or a dash where d was not measured.
func orDash(d time.Duration, text string) string {
	if d <= 0 {
		return "—"
	}
	return text
}

// storesSideBySide is, when the run measured a configuration on both
// stores, one line per configuration with each store's figures.
func storesSideBySide(rows []siteRow) string {
	type key struct{ plans, atOnce int }
	dev, sql := map[key]siteRow{}, map[key]siteRow{}
	var order []key
	for _, r := range rows {
		k := key{r.plans, r.atOnce}
		if _, seen := dev[k]; !seen {
			if _, seen := sql[k]; !seen {
				order = append(order, k)
			}
		}
		if r.store == storeSQL {
			sql[k] = r
		} else {
			dev[k] = r
		}
	}
	var b strings.Builder
	for _, k := range order {
		d, okd := dev[k]
		s, oks := sql[k]
		if !okd || !oks {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nThe two stores side by side, each against the plain program run beside it:\n\n")
			b.WriteString("| plans | plans at once | dev server | ratio to direct | PostgreSQL | ratio to direct | PostgreSQL / dev server |\n")
			b.WriteString("|---:|---:|---:|---:|---:|---:|---:|\n")
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %.2f | %s | %.2f | %.2f |\n", k.plans, k.atOnce, ms(d.measured), float64(d.measured)/float64(d.direct),
			ms(s.measured), float64(s.measured)/float64(s.direct), float64(s.measured)/float64(d.measured))
	}
	return b.String()
}

// siteTargets checks the site rows against their goals.
func siteTargets(rows []siteRow) string {
	var b strings.Builder
	b.WriteString("\n**Targets** (each against figures of this run):\n\n")
	warned := 0
	for _, r := range rows {
		warned += r.warnings
		if r.plans != 100 {
			continue
		}
		x := float64(r.measured) / float64(r.direct)
		verdict := "met"
		if x > siteBound {
			verdict = "**not met**"
		}
		fmt.Fprintf(&b, "- 100 plans, %d at once, %s: within %.2f of the plain program: %.3f (%v against %v) — %s",
			r.atOnce, storeLabel(r), siteBound, x, ms(r.measured), ms(r.direct), verdict)
		if r.floor > 0 {
			// What no site action of child workflows can go below here.
			fmt.Fprintf(&b, "; the plain program plus a workflow running as many children that do nothing, tier by tier (%v): %.3f of the plain program; Drover %.3f of that",
				ms(r.floor), float64(r.direct+r.floor)/float64(r.direct), float64(r.measured)/float64(r.direct+r.floor))
		}
		if r.turns > 0 {
			// The turns the design takes, with no storage call.
			fmt.Fprintf(&b, "; the plain program plus a workflow taking the design's turns (each plan's record asked to accept its version, then each child's checks, their settle and its end: %v): %.3f of the plain program; Drover %.3f of that",
				ms(r.turns), float64(r.direct+r.turns)/float64(r.direct), float64(r.measured)/float64(r.direct+r.turns))
		}
		if r.shaped > 0 {
			// The same turns carrying what Drover's workflows carry.
			fmt.Fprintf(&b, "; the plain program plus the same turns, each child carrying what its plan's failover carried in this run (its input, its tasks' markers, timers and activities, its record's changes, its result: %v): %.3f of the plain program; Drover %.3f of that",
				ms(r.shaped), float64(r.direct+r.shaped)/float64(r.direct), float64(r.measured)/float64(r.direct+r.shaped))
		}
		if r.temporalCPU > 0 {
			// Where the machine's time went meanwhile.
			fmt.Fprintf(&b, "; during the site failover the Temporal server process used %v of CPU (%v a plan) and the worker %v, together %.0f%% of the %d cores over its %v",
				ms(r.temporalCPU), ms(r.temporalCPU/time.Duration(r.plans)), ms(r.workerCPU),
				100*float64(r.temporalCPU+r.workerCPU)/float64(r.measured)/float64(runtime.NumCPU()), runtime.NumCPU(), ms(r.measured))
		}
		if r.machine.total > 0 {
			// Every process: the simulated sites and PostgreSQL's too.
			fmt.Fprintf(&b, "; every process counted, the cores were busy %.0f%% of that time and waiting on disk %.0f%%",
				r.machine.percent(r.machine.busy), r.machine.percent(r.machine.iowait))
		}
		b.WriteString("\n")
	}
	verdict := "met"
	if warned > 0 {
		verdict = "**not met**"
	}
	fmt.Fprintf(&b, "- no history or payload size warning from the server: %d — %s\n", warned, verdict)
	return b.String()
}

// siteCommand is the command line that measures the site rows again.
func siteCommand(o options) string {
	join := func(ns []int) string {
		var s []string
		for _, n := range ns {
			s = append(s, strconv.Itoa(n))
		}
		return strings.Join(s, ",")
	}
	flags := fmt.Sprintf("--site-plans %s --plans-at-once %s --site-groups %d --site-tiers %d --site-latency %v --stores %s --parallelism %d",
		join(o.sitePlans), join(o.siteAtOnce), o.siteGroups, o.siteTiers, o.siteLatency, strings.Join(o.stores, ","), o.parallelism)
	if o.repeat > 1 {
		flags += fmt.Sprintf(" --repeat %d", o.repeat)
	}
	return fmt.Sprintf("make bench-sql SITE_FLAGS='%s'", flags)
}

// table reads the first Markdown table of text: each row as a map from
// its header's column names to the cell's text.
func table(text string) []map[string]string {
	var head []string
	var out []map[string]string
	cells := func(line string) []string {
		line = strings.TrimSpace(line)
		line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
		parts := strings.Split(line, "|")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		return parts
	}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "|") {
			if head != nil {
				break // the table has ended
			}
			continue
		}
		c := cells(line)
		switch {
		case head == nil:
			head = c
		case strings.HasPrefix(c[0], "---") || strings.HasPrefix(c[0], ":--") || c[0] == "---:":
			// the alignment row
		default:
			m := map[string]string{}
			for i, h := range head {
				if i < len(c) {
					m[h] = c[i]
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// duration reads a table's duration ("864ms", "5.326s"); zero for text
// that is none ("not run", "—").
func duration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0
	}
	return d
}

// parseRows reads the per-plan rows back from their section, as far as
// the chart needs them: groups, latency, measured, ideal, sequential,
// direct.
func parseRows(text string) []row {
	var out []row
	for _, m := range table(text) {
		n, err := strconv.Atoi(m["groups"])
		if err != nil {
			continue
		}
		r := row{groups: n, latency: duration(m["latency"]), measured: duration(m["measured"]), ideal: duration(m["ideal"]),
			sequential: duration(m["sequential"]), direct: duration(m["direct"])}
		if r.measured > 0 {
			out = append(out, r)
		}
	}
	return out
}

// parseSiteRows reads the site rows back from their section, as far as
// the chart needs them: store, plans, plans at once, measured, direct.
func parseSiteRows(text string) []siteRow {
	var out []siteRow
	for _, m := range table(text) {
		n, err := strconv.Atoi(m["plans"])
		if err != nil {
			continue
		}
		x, err := strconv.Atoi(m["plans at once"])
		if err != nil {
			continue
		}
		store := storeDev
		if strings.Contains(m["store"], "PostgreSQL") {
			store = storeSQL
		}
		r := siteRow{siteSize: siteSize{store: store, plans: n, atOnce: x, latency: duration(m["latency"])},
			measured: duration(m["measured"]), direct: duration(m["direct"])}
		r.groups, _ = strconv.Atoi(m["groups per plan"])
		r.tiers, _ = strconv.Atoi(m["tiers"])
		if r.measured > 0 {
			out = append(out, r)
		}
	}
	return out
}
