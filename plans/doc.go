// Package plans will hold the declarative YAML failover plan: its schema,
// strict loading with line:column errors, validation and defaults.
//
// Not yet implemented: plans land with the plans issue.
package plans
