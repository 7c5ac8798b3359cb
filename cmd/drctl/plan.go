package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/workflows"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (a *app) planCommand() *cobra.Command {
	plan := &cobra.Command{
		Use:   "plan",
		Short: "Check and explain plans (no Temporal needed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return badInput("give a plan command: validate, show, schema, keygen or sign (see drctl plan --help)")
		},
	}
	plan.AddCommand(&cobra.Command{
		Use:   "validate FILE...",
		Short: "Check plans; every problem with file:line:column",
		Args:  cobra.MinimumNArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return a.planValidate(args) },
	}, &cobra.Command{
		Use:   "show FILE",
		Short: "Print the effective plan, every default filled in (-o yaml or json)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return a.planShow(args[0]) },
	}, &cobra.Command{
		Use:   "schema",
		Short: "Print the plan's JSON Schema",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := plans.JSONSchema()
			if err != nil {
				return failed("plan schema: %v", err)
			}
			_, err = a.stdout.Write(b)
			return err
		},
	})
	plan.AddCommand(a.signCommands()...)
	return plan
}

func (a *app) planValidate(files []string) error {
	type result struct {
		File   string              `json:"file"`
		Valid  bool                `json:"valid"`
		Name   string              `json:"name,omitempty"`
		Errors []*plans.FieldError `json:"errors,omitempty"`
		Error  string              `json:"error,omitempty"`
	}
	var results []result
	bad := false
	for _, f := range files {
		r := result{File: f}
		p, err := plans.Load(f)
		var errs plans.Errors
		switch {
		case err == nil:
			// A plan that validates must start: its workflow input must fit.
			if serr := workflows.CheckInputSize(p); serr != nil {
				r.Error = fmt.Sprintf("%s: %v", f, serr)
				break
			}
			r.Valid, r.Name = true, p.Metadata.Name
		case errors.As(err, &errs):
			r.Errors = errs
		default:
			r.Error = err.Error()
		}
		bad = bad || !r.Valid
		results = append(results, r)
	}
	if a.json() {
		writeJSON(a.stdout, results)
	} else {
		for _, r := range results {
			switch {
			case r.Valid:
				fmt.Fprintf(a.stdout, "%s: plan %q is valid\n", r.File, r.Name)
			case r.Error != "":
				fmt.Fprintf(a.stderr, "%s\n", r.Error)
			default:
				for _, e := range r.Errors {
					fmt.Fprintln(a.stderr, e)
				}
				fmt.Fprintf(a.stderr, "%s: %d problem(s); fix them and run drctl plan validate again\n", r.File, len(r.Errors))
			}
		}
	}
	if bad {
		return silent(exitBadInput)
	}
	return nil
}

func (a *app) planShow(file string) error {
	p, err := plans.Load(file)
	if err != nil {
		return &exitError{exitBadInput, err}
	}
	// The test recovery's time limit came after signatures: its default
	// stays out of ApplyDefaults (and so out of what a signature covers,
	// that earlier signatures verify) and is applied where it is used.
	if p.Policy.TestTimeLimit == 0 {
		p.Policy.TestTimeLimit = plans.Duration(workflows.DefaultTestTimeLimit)
	}
	if a.json() {
		writeJSON(a.stdout, p)
		return nil
	}
	b, err := p.YAML()
	if err != nil {
		return failed("plan show: %v", err)
	}
	fmt.Fprintf(a.stdout, "# effective plan %q: %s with every default filled in\n", p.Metadata.Name, file)
	_, err = a.stdout.Write(b)
	return err
}

// loadPlan loads a plan file for an action; a bad plan is bad input.
func loadPlan(file string) (*plans.Plan, error) {
	p, err := plans.Load(file)
	if err == nil {
		err = workflows.CheckInputSize(p)
	}
	if err != nil {
		return nil, &exitError{exitBadInput, fmt.Errorf("%v\nfix the plan (drctl plan validate %s) and try again", err, file)}
	}
	return p, nil
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
