// Package workflows will hold Drover's DR actions as Temporal workflows:
// Failover, Reprotect, Failback, Drill and Protect, one file per action,
// each readable top to bottom.
//
// Not yet implemented: the actions land with the workflows issue. Until
// then this package only marks its place in the layout.
package workflows
