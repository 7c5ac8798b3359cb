package activities_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// TestCSICopiesOfAReplica: on the secondary site b, a group snapshot of
// the replica of vg-1 and a copy of one member, through the plan's
// storage.csi endpoint, each created twice under one name (as a retried
// activity would) with the same result; the copy holds the replica's data
// of the snapshot's moment; the deletes leave nothing behind and can run
// again; the replica's role never changed.
func TestCSICopiesOfAReplica(t *testing.T) {
	a, b := simtest.StartPair(t, simtest.Options{Interval: 20 * time.Millisecond})
	p := pairPlan(a, b)
	// The CSI controller is reached on its own address entry (here the
	// same socket): storage.csi is what the calls dial.
	p.Sites[1].Storage.CSI = b.Endpoint()
	p.Sites[1].Storage.Endpoint = "unix:///nonexistent/drover.sock"
	p.Sites[1].Storage.Replication = b.Endpoint()
	st := newStorage(t)
	env := activityEnv(t, st)
	for _, site := range []string{"a", "b"} {
		_, err := env.ExecuteActivity(st.EnableVolumeReplication, groupInput(t, p, site, "db", activities.RPCEnableVolumeReplication, false))
		mustOK(t, err)
	}
	w, err := sim.NewClient(a.DataAddr(), simtest.NodeA, "a-node")
	mustOK(t, err)
	defer w.Close()
	_, err = w.Write(ctxT(t), "v1", 0, []byte("production data"))
	mustOK(t, err)
	simtest.Eventually(t, 5*time.Second, "the write to reach b", func() bool {
		u := b.Snapshot().Unit("vg/vg-1")
		return u != nil && string(u.Blocks["v1"][0].Data) == "production data"
	})
	before := b.Snapshot()

	in := activities.SnapshotInput{Endpoint: endpoint(t, p, "b", activities.RPCCreateVolumeGroupSnapshot), Name: "test-db", Volumes: []string{"v1", "v2"}}
	var gs, again activities.GroupSnapshot
	v, err := env.ExecuteActivity(st.CreateVolumeGroupSnapshot, in)
	mustOK(t, err)
	mustOK(t, v.Get(&gs))
	v, err = env.ExecuteActivity(st.CreateVolumeGroupSnapshot, in)
	mustOK(t, err)
	mustOK(t, v.Get(&again))
	if gs.ID == "" || gs.ID != again.ID || len(gs.Snapshots) != 2 || gs.Snapshots[0].Volume != "v1" {
		t.Fatalf("group snapshot %+v, again %+v", gs, again)
	}
	cin := activities.CopyInput{Endpoint: endpoint(t, p, "b", activities.RPCCreateVolume), Name: "test-db-v1", Snapshot: gs.Snapshots[0].ID}
	var cp, cp2 activities.Copy
	v, err = env.ExecuteActivity(st.CreateVolume, cin)
	mustOK(t, err)
	mustOK(t, v.Get(&cp))
	v, err = env.ExecuteActivity(st.CreateVolume, cin)
	mustOK(t, err)
	mustOK(t, v.Get(&cp2))
	if cp.ID == "" || cp != cp2 {
		t.Fatalf("copies %+v and %+v, want one", cp, cp2)
	}
	r, err := sim.NewClient(b.DataAddr(), simtest.NodeB, "b-node")
	mustOK(t, err)
	defer r.Close()
	got, err := r.Read(ctxT(t), cp.ID, 0)
	mustOK(t, err)
	if string(got) != "production data" {
		t.Fatalf("the copy holds %q", got)
	}

	// A name reused for another source is refused for good.
	_, err = env.ExecuteActivity(st.CreateVolume, activities.CopyInput{Endpoint: cin.Endpoint, Name: "test-db-v1", Snapshot: gs.Snapshots[1].ID})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || !ae.NonRetryable() || !strings.Contains(err.Error(), "AlreadyExists") {
		t.Fatalf("a name reused for another snapshot: %v, want a final AlreadyExists", err)
	}

	for range 2 {
		_, err = env.ExecuteActivity(st.DeleteVolume, activities.DeleteInput{Endpoint: endpoint(t, p, "b", activities.RPCDeleteVolume), ID: cp.ID})
		mustOK(t, err)
		members := []string{gs.Snapshots[0].ID, gs.Snapshots[1].ID}
		_, err = env.ExecuteActivity(st.DeleteVolumeGroupSnapshot, activities.DeleteInput{Endpoint: endpoint(t, p, "b", activities.RPCDeleteVolumeGroupSnapshot), ID: gs.ID, Members: members})
		mustOK(t, err)
	}
	after := b.Snapshot()
	if n := len(after.Snapshots) + len(after.GroupSnapshots) + len(after.Clones); n != 0 {
		t.Fatalf("%d CSI objects left on b after the cleanup", n)
	}
	if d := sim.ReplicasUnchanged(before, after, true); len(d) != 0 {
		t.Fatalf("the replicas changed: %v", d)
	}
}

// TestCSISecretsAndReplicas: a site that wants secrets refuses CSI calls
// without them, for good (UNAUTHENTICATED), and takes them from the plan's
// secret reference; a replica's deletion is refused by the storage and,
// "volume in use", retried until the call's time runs out.
func TestCSISecretsAndReplicas(t *testing.T) {
	a, b := simtest.StartPair(t, simtest.Options{TweakA: func(c *sim.Config) { c.Secrets = map[string]string{"KEY": "s3cret"} }})
	p := pairPlan(a, b)
	st := newStorage(t)
	env := activityEnv(t, st)
	in := activities.SnapshotInput{Endpoint: endpoint(t, p, "a", activities.RPCCreateSnapshot), Name: "s", Volumes: []string{"v1"}}
	_, err := env.ExecuteActivity(st.CreateSnapshot, in)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrNotAuthenticated || !ae.NonRetryable() {
		t.Fatalf("without secrets: %v, want a final NotAuthenticated", err)
	}
	t.Setenv("CSI_TEST_KEY", "s3cret")
	p.Sites[0].Storage.Secret = &plans.SecretRef{Env: "CSI_TEST"}
	in.Endpoint = endpoint(t, p, "a", activities.RPCCreateSnapshot)
	_, err = env.ExecuteActivity(st.CreateSnapshot, in)
	mustOK(t, err)

	del := activities.DeleteInput{Endpoint: endpoint(t, p, "a", activities.RPCDeleteVolume), ID: "v1"}
	ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
	defer cancel()
	err = st.DeleteVolume(ctx, del)
	if !errors.As(err, &ae) || ae.Type() != activities.ErrInUse || ae.NonRetryable() {
		t.Fatalf("deleting a replica: %v, want a retryable InUse (FAILED_PRECONDITION, volume in use)", err)
	}
	if u := a.Snapshot().Unit("vg/vg-1"); u == nil {
		t.Fatal("the replica is gone")
	}
}
