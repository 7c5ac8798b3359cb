// Command drctl is Drover's operator CLI.
//
// Implemented so far: the plan commands.
//
//	drctl plan validate FILE...   check plans; every problem with file:line:column
//	drctl plan show FILE          print the effective plan, defaults filled in
//	drctl plan schema             print the plan's JSON Schema
//
// Exit codes: 0 done, 2 bad input. The DR actions (failover, reprotect,
// failback, drill, protect, status, watch…) land with the operator-surface
// issue.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/drover-dr/drover/plans"
)

const usage = `drctl — Drover's operator CLI

Usage:
  drctl plan validate [-o text|json] FILE...   check plans
  drctl plan show [-o yaml|json] FILE          print the effective plan (defaults filled in)
  drctl plan schema                            print the plan JSON Schema

Not yet available: failover, reprotect, failback, drill, protect, status,
watch, list, resolve, approve, cancel.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] != "plan" {
		fmt.Fprintf(stderr, "drctl: %q is not available yet; see drctl --help\n", args[0])
		return 2
	}
	if len(args) < 2 {
		fmt.Fprint(stderr, "drctl plan: give validate, show or schema\n")
		return 2
	}
	switch args[1] {
	case "validate":
		return planValidate(args[2:], stdout, stderr)
	case "show":
		return planShow(args[2:], stdout, stderr)
	case "schema":
		b, err := plans.JSONSchema()
		if err != nil {
			fmt.Fprintf(stderr, "drctl plan schema: %v\n", err)
			return 1
		}
		stdout.Write(b)
		return 0
	}
	fmt.Fprintf(stderr, "drctl plan: unknown command %q (validate, show or schema)\n", args[1])
	return 2
}

func planValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("drctl plan validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "text", "output: text or json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 || (*out != "text" && *out != "json") {
		fmt.Fprintln(stderr, "usage: drctl plan validate [-o text|json] FILE...")
		return 2
	}
	type result struct {
		File   string              `json:"file"`
		Valid  bool                `json:"valid"`
		Name   string              `json:"name,omitempty"`
		Errors []*plans.FieldError `json:"errors,omitempty"`
		Error  string              `json:"error,omitempty"`
	}
	var results []result
	code := 0
	for _, f := range fs.Args() {
		r := result{File: f}
		p, err := plans.Load(f)
		var errs plans.Errors
		switch {
		case err == nil:
			r.Valid, r.Name = true, p.Metadata.Name
		case errors.As(err, &errs):
			r.Errors = errs
			code = 2
		default:
			r.Error = err.Error()
			code = 2
		}
		results = append(results, r)
	}
	if *out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(results)
		return code
	}
	for _, r := range results {
		switch {
		case r.Valid:
			fmt.Fprintf(stdout, "%s: plan %q is valid\n", r.File, r.Name)
		case r.Error != "":
			fmt.Fprintf(stderr, "%s\n", r.Error)
		default:
			for _, e := range r.Errors {
				fmt.Fprintln(stderr, e)
			}
			fmt.Fprintf(stderr, "%s: %d problem(s); fix them and run drctl plan validate again\n", r.File, len(r.Errors))
		}
	}
	return code
}

func planShow(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("drctl plan show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "yaml", "output: yaml or json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || (*out != "yaml" && *out != "json") {
		fmt.Fprintln(stderr, "usage: drctl plan show [-o yaml|json] FILE")
		return 2
	}
	p, err := plans.Load(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if *out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(p)
		return 0
	}
	b, err := p.YAML()
	if err != nil {
		fmt.Fprintf(stderr, "drctl plan show: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "# effective plan %q: %s with every default filled in\n", p.Metadata.Name, fs.Arg(0))
	stdout.Write(b)
	return 0
}
