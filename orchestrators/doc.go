// Package orchestrators holds the container-orchestrator (CO) adapters
// behind one small interface, Orchestrator: stop a workload on a site,
// wait until nothing of it runs, start it, check its health, describe it. Nomad is driven through its HTTP
// API; any other CO through exec hooks the plan gives per workload and
// site. A stop is confirmed, not assumed: WaitStopped follows a Nomad
// job's allocations with blocking queries until every one is terminal, or
// polls an exec workload's stopped hook. Errors are *Error values that say whether retrying can help.
//
// For a test recovery (nomadtest.go), the Nomad adapter registers a copy
// of a job in the test namespace on copies of its CSI volumes, refusing
// a job that would mount a volume not copied, purges the copy once it
// has stopped, and makes, copies and deletes CSI snapshots and volumes
// through Nomad's CSI API.
//
// For a failover to a point in time (nomadrestore.go), a job marked with
// plans.NomadJob.Restore is registered with every CSI volume source
// replaced by the volume restored from the point, the point in its meta;
// a job that mounts a CSI volume the point did not restore is refused,
// so that it never runs on a replica the point replaced. After a
// reprotect has made the restored volumes the protected ones, every
// action that starts the plan's jobs marks them the same way with the
// volumes that stand in at that site, and RegisterVolume registers the
// returned site's copies of the restored volumes with its Nomad, with
// the plugin, namespace and capabilities of the volume each stands in
// for. CheckRestored reads a job the same way, registering nothing;
// DescribeWorkload names the volumes such a job will claim.
package orchestrators
