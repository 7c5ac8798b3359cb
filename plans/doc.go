// Package plans holds Drover's declarative failover plan: the schema (the
// Go types in types.go), strict loading, validation and defaults.
//
// A plan (apiVersion drover.dev/v1alpha1, kind FailoverPlan) describes one
// protected application set across exactly two sites: each site's
// CSI-Addons endpoints, TLS, secret reference, plugin parameters, client
// CIDRs to fence and orchestrator (Nomad or exec hooks); the volume groups
// and their ids on each site; the workloads with their priorities and the
// groups they need; and the policy (parallelism, RPO target, retry
// back-off, per-RPC deadlines, fencing requirement, what a failed step
// does, approval gates).
//
// Loading is strict: unknown and duplicate keys and ill-typed values are
// errors, and so are the semantic problems (names unique, references
// resolve, CIDRs parse, every group and workload named on both sites,
// durations parse). Every error carries file, line, column and the key's
// path, e.g.
//
//	plan.yaml:17:28: sites[1].fence.cidrs[1]: "10.0.0/24" is not a CIDR
//
// and one load reports all of them (up to 100), not the first only.
// Defaults are applied in one place, ApplyDefaults; `drctl plan show`
// prints the effective plan. JSONSchema generates the plan's JSON Schema
// from the same types (plan.schema.json, kept current by `make schema` and
// a test). plans/examples holds a minimal plan, a Nomad plan, an exec-hooks
// plan and the demo plan for the simulator pair of `make sim`.
package plans
