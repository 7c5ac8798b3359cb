// Package orchestrators holds the container-orchestrator (CO) adapters
// behind one small interface, Orchestrator: stop a workload on a site,
// start it, check its health, describe it. Nomad is driven through its HTTP
// API; any other CO through exec hooks the plan gives per workload and
// site. Errors are *Error values that say whether retrying can help.
package orchestrators
