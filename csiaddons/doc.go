// Package csiaddons holds the CSI-Addons protocol that Drover speaks to
// storage drivers, as Go code generated from the specifications.
//
// Three services live in sub-packages, one per proto package:
//
//   - fence: fence.FenceController (FenceClusterNetwork,
//     UnfenceClusterNetwork, ListClusterFence, GetFenceClients).
//   - replication: replication.Controller (Enable/DisableVolumeReplication,
//     PromoteVolume, DemoteVolume, ResyncVolume, GetVolumeReplicationInfo),
//     including the newer status and status_message fields of
//     GetVolumeReplicationInfoResponse.
//   - identity: identity.Identity (GetIdentity, GetCapabilities, Probe).
//
// The .proto files beside the generated code are transcribed from the
// CSI-Addons specifications: package, service and message names and field
// numbers match them exactly, so Drover talks to real drivers (ceph-csi and
// others) unchanged. The csi_secret field option comes from the CSI spec
// module's csi.proto.
//
// Everything ending in .pb.go is generated: edit the .proto files and run
// `make generate` (scripts/gen-proto.sh pins protoc and the Go generators).
package csiaddons
