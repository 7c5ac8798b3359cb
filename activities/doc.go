// Package activities will hold one Temporal activity per CSI-Addons storage
// RPC and per orchestrator action, the classification of gRPC codes into
// retry decisions, endpoint dialing and secret resolution.
//
// Not yet implemented: the activities land with the activities issue.
package activities
