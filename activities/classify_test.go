package activities_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc/codes"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/wftest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// attempt is one start of an activity, on the test environment's clock.
type attempt struct {
	n  int32
	at time.Time
}

// runCall executes one storage activity by name with the given options,
// in Temporal's test workflow environment, which applies the retry policy
// on a mocked clock. It returns every attempt and the final error; out,
// when given, receives the result.
func runCall(t *testing.T, st *activities.Storage, opts workflow.ActivityOptions, rpc string, in any, out ...any) ([]attempt, error) {
	t.Helper()
	var res any
	if len(out) > 0 {
		res = out[0]
	}
	return runActivity(t, []any{st}, opts, rpc, in, res)
}

// runActivity is runCall for any registered activity structs.
func runActivity(t *testing.T, acts []any, opts workflow.ActivityOptions, name string, in, out any) ([]attempt, error) {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := wftest.New(&ts)
	for _, a := range acts {
		env.RegisterActivity(a)
	}
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, opts)
		return workflow.ExecuteActivity(ctx, name, in).Get(ctx, out)
	}, workflow.RegisterOptions{Name: "call"})
	var attempts []attempt
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		attempts = append(attempts, attempt{n: info.Attempt, at: env.Now()})
	})
	env.ExecuteWorkflow("call")
	if !env.IsWorkflowCompleted() {
		t.Fatalf("%s: the workflow did not complete", name)
	}
	return attempts, env.GetWorkflowError()
}

// gaps are the back-off pauses between attempts.
func gaps(as []attempt) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(as); i++ {
		out = append(out, as[i].at.Sub(as[i-1].at).Round(10*time.Millisecond))
	}
	return out
}

// tablePair starts a pair with replication enabled and synced, and gives
// for each RPC an input on which the RPC succeeds.
func tablePair(t *testing.T) (map[string]*simtest.Site, *plans.Plan, map[string]any) {
	t.Helper()
	a, b := simtest.StartPair(t, simtest.Options{Interval: 20 * time.Millisecond})
	p := pairPlan(a, b)
	st := newStorage(t)
	env := activityEnv(t, st)
	for _, site := range []string{"a", "b"} {
		for _, g := range []string{"db", "loose"} {
			_, err := env.ExecuteActivity(st.EnableVolumeReplication, groupInput(t, p, site, g, activities.RPCEnableVolumeReplication, false))
			mustOK(t, err)
		}
	}
	_, err := env.ExecuteActivity(st.WaitForSync, activities.WaitSyncInput{
		Call: groupInput(t, p, "a", "db", activities.RPCGetVolumeReplicationInfo, false), Interval: 10 * time.Millisecond})
	mustOK(t, err)
	ident := func(rpc string) any { return activities.IdentityInput{Endpoint: endpoint(t, p, "a", rpc)} }
	list := func(rpc string) any { return activities.FenceListInput{Endpoint: endpoint(t, p, "a", rpc)} }
	cidr := func(rpc string) any {
		return activities.FenceInput{Endpoint: endpoint(t, p, "a", rpc), CIDRs: []string{"127.0.0.9/32"}}
	}
	repl := func(site, group, rpc string) any { return groupInput(t, p, site, group, rpc, false) }
	inputs := map[string]any{
		activities.RPCGetIdentity:              ident(activities.RPCGetIdentity),
		activities.RPCGetCapabilities:          ident(activities.RPCGetCapabilities),
		activities.RPCProbe:                    ident(activities.RPCProbe),
		activities.RPCFenceClusterNetwork:      cidr(activities.RPCFenceClusterNetwork),
		activities.RPCUnfenceClusterNetwork:    cidr(activities.RPCUnfenceClusterNetwork),
		activities.RPCListClusterFence:         list(activities.RPCListClusterFence),
		activities.RPCGetFenceClients:          list(activities.RPCGetFenceClients),
		activities.RPCEnableVolumeReplication:  repl("a", "db", activities.RPCEnableVolumeReplication),
		activities.RPCDisableVolumeReplication: repl("b", "loose", activities.RPCDisableVolumeReplication),
		activities.RPCPromoteVolume:            repl("a", "db", activities.RPCPromoteVolume),            // already primary
		activities.RPCDemoteVolume:             repl("b", "db", activities.RPCDemoteVolume),             // already secondary
		activities.RPCResyncVolume:             repl("b", "db", activities.RPCResyncVolume),             // a secondary
		activities.RPCGetVolumeReplicationInfo: repl("a", "db", activities.RPCGetVolumeReplicationInfo), // synced primary
	}
	// The CSI calls, on site a: a snapshot to copy from, made first; the
	// deletes name what never was (OK by the spec).
	snap := func(rpc string, vols ...string) any {
		return activities.SnapshotInput{Endpoint: endpoint(t, p, "a", rpc), Name: "table-" + rpc, Volumes: vols}
	}
	del := func(rpc string) any {
		return activities.DeleteInput{Endpoint: endpoint(t, p, "a", rpc), ID: "never-was"}
	}
	sn, err := env.ExecuteActivity(st.CreateSnapshot, snap(activities.RPCCreateSnapshot, "v1"))
	mustOK(t, err)
	var made activities.Snapshot
	mustOK(t, sn.Get(&made))
	inputs[activities.RPCCreateSnapshot] = snap(activities.RPCCreateSnapshot, "v1")
	inputs[activities.RPCCreateVolumeGroupSnapshot] = snap(activities.RPCCreateVolumeGroupSnapshot, "v1", "v2")
	inputs[activities.RPCCreateVolume] = activities.CopyInput{Endpoint: endpoint(t, p, "a", activities.RPCCreateVolume), Name: "table-copy", Snapshot: made.ID}
	inputs[activities.RPCDeleteVolume] = del(activities.RPCDeleteVolume)
	inputs[activities.RPCDeleteSnapshot] = del(activities.RPCDeleteSnapshot)
	inputs[activities.RPCDeleteVolumeGroupSnapshot] = del(activities.RPCDeleteVolumeGroupSnapshot)
	return map[string]*simtest.Site{"a": a, "b": b}, p, inputs
}

// Outcomes, short, for the expectation rows below.
const (
	F = activities.Fail
	R = activities.Retry
	H = activities.HandBack
	D = activities.Done
)

// specCodes are the columns of specRows: every non-OK gRPC code, in code
// order.
var specCodes = []codes.Code{
	codes.Canceled, codes.Unknown, codes.InvalidArgument, codes.DeadlineExceeded,
	codes.NotFound, codes.AlreadyExists, codes.PermissionDenied, codes.ResourceExhausted,
	codes.FailedPrecondition, codes.Aborted, codes.OutOfRange, codes.Unimplemented,
	codes.Internal, codes.Unavailable, codes.DataLoss, codes.Unauthenticated,
}

// specRows is what each RPC must do with each code, written out from the
// specs, not from the table under test:
//
//   - every error table (fence: csi-addons-fence.md "Error Scheme";
//     replication: one table per RPC in csi-addons-replication.txt) says
//     INVALID_ARGUMENT "Caller MUST fix the request", UNIMPLEMENTED "Caller
//     MUST NOT retry", UNAUTHENTICATED "Caller SHALL either fix the
//     secrets", UNKNOWN "Caller MUST study the logs before retrying": fail;
//   - the replication tables list NOT_FOUND "Volume does not exist …
//     retrying with exponential back off" and ABORTED "Operation pending
//     for volume … retry with exponential back off": retry;
//     DisableVolumeReplication's NOT_FOUND means nothing is left to
//     disable (wire-notes.md): done; the fence and identity services list
//     no NOT_FOUND: fail;
//   - FAILED_PRECONDITION ("Volume is not replicated", "image is not
//     demoted / promoted") needs a decision: hand back to the workflow;
//   - DEADLINE_EXCEEDED and UNAVAILABLE: "any RPC MAY time out and MAY be
//     retried" (csi-spec.txt), the endpoint may come back: retry;
//     RESOURCE_EXHAUSTED: the CSI rows say retry with exponential backoff;
//   - no table names CANCELLED, ALREADY_EXISTS, PERMISSION_DENIED
//     (an administrator must act), OUT_OF_RANGE, INTERNAL, DATA_LOSS: fail.
//
// The CSI controller calls (csi-spec.txt's error tables): CreateVolume's
// NOT_FOUND "Source does not exist … retrying with exponential back off":
// retry; its ALREADY_EXISTS and OUT_OF_RANGE "MUST fix": fail.
// DeleteVolume's FAILED_PRECONDITION "Volume in use … retry with
// exponential back off": retry; a missing volume "MUST reply 0 OK", so
// NOT_FOUND: done. CreateSnapshot's RESOURCE_EXHAUSTED "Caller SHOULD
// fail this request": fail; ALREADY_EXISTS: fail; ABORTED: retry.
// DeleteSnapshot as DeleteVolume. The group snapshot calls have no table
// there and follow their single-snapshot counterparts.
//
// Columns: CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND,
// ALREADY_EXISTS, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION,
// ABORTED, OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS,
// UNAUTHENTICATED.
var specRows = map[string][16]activities.Outcome{
	activities.RPCGetIdentity:               {F, F, F, R, F, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCGetCapabilities:           {F, F, F, R, F, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCProbe:                     {F, F, F, R, F, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCFenceClusterNetwork:       {F, F, F, R, F, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCUnfenceClusterNetwork:     {F, F, F, R, F, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCListClusterFence:          {F, F, F, R, F, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCGetFenceClients:           {F, F, F, R, F, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCEnableVolumeReplication:   {F, F, F, R, R, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCDisableVolumeReplication:  {F, F, F, R, D, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCPromoteVolume:             {F, F, F, R, R, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCDemoteVolume:              {F, F, F, R, R, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCResyncVolume:              {F, F, F, R, R, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCGetVolumeReplicationInfo:  {F, F, F, R, R, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCCreateSnapshot:            {F, F, F, R, F, F, F, F, H, R, F, F, F, R, F, F},
	activities.RPCDeleteSnapshot:            {F, F, F, R, D, F, F, R, R, R, F, F, F, R, F, F},
	activities.RPCCreateVolume:              {F, F, F, R, R, F, F, R, H, R, F, F, F, R, F, F},
	activities.RPCDeleteVolume:              {F, F, F, R, D, F, F, R, R, R, F, F, F, R, F, F},
	activities.RPCCreateVolumeGroupSnapshot: {F, F, F, R, F, F, F, F, H, R, F, F, F, R, F, F},
	activities.RPCDeleteVolumeGroupSnapshot: {F, F, F, R, D, F, F, R, R, R, F, F, F, R, F, F},
}

// specTypes is the application error type each code's failure carries.
var specTypes = [16]string{
	"Unexpected", "UnknownError", "InvalidArgument", "DeadlineExceeded",
	"NotFound", "AlreadyExists", "Unexpected", "ResourceExhausted",
	"FailedPrecondition", "OperationPending", "Unexpected", "NotImplemented",
	"Unexpected", "Unavailable", "Unexpected", "NotAuthenticated",
}

// specType is the type of a row: specTypes, but InUse for the
// FAILED_PRECONDITION ("in use") the CSI deletes retry, so that
// FailedPrecondition itself stays final for every RPC.
func specType(rpc string, col int) string {
	if specCodes[col] == codes.FailedPrecondition && specRows[rpc][col] == R {
		return "InUse"
	}
	return specTypes[col]
}

// specRPCs is the order of the RPCs, as the table lists them.
var specRPCs = []string{
	activities.RPCGetIdentity, activities.RPCGetCapabilities, activities.RPCProbe,
	activities.RPCFenceClusterNetwork, activities.RPCUnfenceClusterNetwork, activities.RPCListClusterFence, activities.RPCGetFenceClients,
	activities.RPCEnableVolumeReplication, activities.RPCDisableVolumeReplication, activities.RPCPromoteVolume,
	activities.RPCDemoteVolume, activities.RPCResyncVolume, activities.RPCGetVolumeReplicationInfo,
	activities.RPCCreateSnapshot, activities.RPCDeleteSnapshot, activities.RPCCreateVolume, activities.RPCDeleteVolume,
	activities.RPCCreateVolumeGroupSnapshot, activities.RPCDeleteVolumeGroupSnapshot,
}

// TestTableMatchesSpecRows: the published table (Table) holds exactly the
// rows written out above, in order.
func TestTableMatchesSpecRows(t *testing.T) {
	rows := activities.Table()
	if len(rows) != len(specRPCs)*len(specCodes) {
		t.Fatalf("table has %d rows, want %d RPCs x %d codes", len(rows), len(specRPCs), len(specCodes))
	}
	i := 0
	for _, rpc := range specRPCs {
		for j, c := range specCodes {
			want := activities.Rule{RPC: rpc, Code: c, Outcome: specRows[rpc][j], Type: specType(rpc, j)}
			if rows[i] != want {
				t.Errorf("row %d: %+v, want %+v", i, rows[i], want)
			}
			i++
		}
	}
}

// TestClassificationTable walks every expected row against the real
// activities: the simulator answers the row's code three times, then the
// real call runs. A retry row must take four attempts whose pauses follow
// the plan's back-off (1s, 2s, 4s) and succeed; a fail or hand-back row
// must stop after one attempt with a non-retryable error of the row's
// type that names the RPC, the site, the subject and the plugin's
// message; a done row must succeed at once.
func TestClassificationTable(t *testing.T) {
	for _, rpc := range specRPCs {
		t.Run(rpc, func(t *testing.T) {
			sites, p, inputs := tablePair(t)
			st := newStorage(t)
			site := "a"
			if e, ok := inputs[rpc].(activities.ReplicationInput); ok {
				site = e.Endpoint.Site
			}
			opts := activities.CallOptions(p, site, rpc)
			target := sites[site]
			for j, code := range specCodes {
				row := activities.Rule{RPC: rpc, Code: code, Outcome: specRows[rpc][j], Type: specType(rpc, j)}
				t.Run(code.String(), func(t *testing.T) {
					msg := fmt.Sprintf("plugin says %s", row.Code)
					setFaults(t, target, sim.FaultRule{Method: rpc, Code: faultCode(row.Code), Count: 3, Message: msg})
					defer setFaults(t, target)
					attempts, err := runCall(t, st, opts, rpc, inputs[rpc])
					checkRow(t, row, attempts, err, msg)
					if in, ok := inputs[rpc].(activities.ReplicationInput); ok && err != nil && !strings.Contains(err.Error(), in.Source.String()) {
						t.Fatalf("message %q does not name %s", err, in.Source)
					}
				})
			}
		})
	}
}

func checkRow(t *testing.T, row activities.Rule, attempts []attempt, err error, pluginMsg string) {
	t.Helper()
	switch row.Outcome {
	case activities.Retry:
		if err != nil {
			t.Fatalf("after three %s answers: %v", row.Code, err)
		}
		if len(attempts) != 4 {
			t.Fatalf("%d attempts, want 4", len(attempts))
		}
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
		if g := gaps(attempts); !slices.Equal(g, want) {
			t.Fatalf("back-off %v, want %v", g, want)
		}
	case activities.Done:
		if err != nil || len(attempts) != 1 {
			t.Fatalf("%d attempts, error %v; want one attempt and done", len(attempts), err)
		}
	case activities.Fail, activities.HandBack:
		if len(attempts) != 1 {
			t.Fatalf("%d attempts, want 1 (no retry)", len(attempts))
		}
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) {
			t.Fatalf("error %v is not an application error", err)
		}
		if ae.Type() != row.Type || !ae.NonRetryable() {
			t.Fatalf("type %q non-retryable=%v, want %q non-retryable", ae.Type(), ae.NonRetryable(), row.Type)
		}
		for _, part := range []string{row.RPC, `site "`, pluginMsg} {
			if !strings.Contains(ae.Error(), part) {
				t.Fatalf("message %q lacks %q", ae.Error(), part)
			}
		}
		typ, f, ok := activities.FailureOf(err)
		if !ok || typ != row.Type || f.RPC != row.RPC || f.Message != pluginMsg {
			t.Fatalf("FailureOf = %q %+v %v", typ, f, ok)
		}
	}
}

// TestTableFollowsSpec pins the rows the specs spell out, so that a change
// of the table is a visible change of this list.
func TestTableFollowsSpec(t *testing.T) {
	for _, tc := range []struct {
		rpc  string
		code codes.Code
		want activities.Outcome
	}{
		{activities.RPCPromoteVolume, codes.Aborted, activities.Retry},
		{activities.RPCPromoteVolume, codes.NotFound, activities.Retry},
		{activities.RPCPromoteVolume, codes.FailedPrecondition, activities.HandBack},
		{activities.RPCPromoteVolume, codes.InvalidArgument, activities.Fail},
		{activities.RPCPromoteVolume, codes.Unimplemented, activities.Fail},
		{activities.RPCPromoteVolume, codes.Unauthenticated, activities.Fail},
		{activities.RPCPromoteVolume, codes.Unknown, activities.Fail},
		{activities.RPCPromoteVolume, codes.Unavailable, activities.Retry},
		{activities.RPCPromoteVolume, codes.DeadlineExceeded, activities.Retry},
		{activities.RPCPromoteVolume, codes.ResourceExhausted, activities.Retry},
		{activities.RPCPromoteVolume, codes.Internal, activities.Fail},
		{activities.RPCDisableVolumeReplication, codes.NotFound, activities.Done},
		{activities.RPCGetVolumeReplicationInfo, codes.NotFound, activities.Retry},
		{activities.RPCFenceClusterNetwork, codes.NotFound, activities.Fail},
		{activities.RPCFenceClusterNetwork, codes.Aborted, activities.Retry},
		{activities.RPCFenceClusterNetwork, codes.FailedPrecondition, activities.HandBack},
		{activities.RPCProbe, codes.Unavailable, activities.Retry},
	} {
		if got := activities.Classify(tc.rpc, tc.code); got != tc.want {
			t.Errorf("Classify(%s, %s) = %s, want %s", tc.rpc, tc.code, got, tc.want)
		}
	}
	final := activities.NonRetryableTypes()
	for _, typ := range []string{activities.ErrInvalidArgument, activities.ErrNotImplemented, activities.ErrNotAuthenticated,
		activities.ErrUnknown, activities.ErrFailedPrecondition, activities.ErrTLS, activities.ErrSecretUnavailable} {
		if !slices.Contains(final, typ) {
			t.Errorf("NonRetryableTypes %v lacks %s", final, typ)
		}
	}
	for _, typ := range []string{activities.ErrOperationPending, activities.ErrNotFound, activities.ErrUnavailable} {
		if slices.Contains(final, typ) {
			t.Errorf("NonRetryableTypes %v holds the retryable %s", final, typ)
		}
	}
}

// TestCallDeadline: a call that hangs (a forced promote on a real driver
// can) ends at its own deadline from the plan and is retried, not left
// hanging until the activity's timeout.
func TestCallDeadline(t *testing.T) {
	a, b := simtest.StartPair(t, simtest.Options{})
	p := pairPlan(a, b)
	p.Policy.Deadlines[activities.RPCPromoteVolume] = plans.Duration(100 * time.Millisecond)
	setFaults(t, b, sim.FaultRule{Method: activities.RPCPromoteVolume, Latency: time.Minute})
	st := newStorage(t)
	env := activityEnv(t, st)
	in := groupInput(t, p, "b", "db", activities.RPCPromoteVolume, true)
	if in.Endpoint.Deadline != 100*time.Millisecond {
		t.Fatalf("endpoint deadline %v, want the plan's 100ms", in.Endpoint.Deadline)
	}
	_, err := env.ExecuteActivity(st.PromoteVolume, in)
	if final, msg := wantType(t, err, activities.ErrDeadlineExceeded); final || !strings.Contains(msg, `volume group "vg-1"`) {
		t.Fatalf("a call past its deadline must be retryable and name its group: %q", msg)
	}
}

// TestRetryBounds: the plan's maximum interval caps the back-off, its
// maximum attempts and its time limit end the retries, and a site that is
// really down (not an injected code) fails within the time limit.
func TestRetryBounds(t *testing.T) {
	a, b := simtest.StartPair(t, simtest.Options{})
	p := pairPlan(a, b)
	st := newStorage(t)
	in := activities.IdentityInput{Endpoint: endpoint(t, p, "a", activities.RPCProbe)}

	p.Policy.Retry.MaximumInterval = plans.Duration(3 * time.Second)
	p.Policy.Retry.MaximumAttempts = 5
	setFaults(t, a, sim.FaultRule{Method: activities.RPCProbe, Code: "ABORTED", Count: 10})
	attempts, err := runCall(t, st, activities.CallOptions(p, "a", activities.RPCProbe), activities.RPCProbe, in)
	if len(attempts) != 5 {
		t.Fatalf("%d attempts, want maximumAttempts 5", len(attempts))
	}
	if g, want := gaps(attempts), []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}; !slices.Equal(g, want) {
		t.Fatalf("back-off %v, want %v (capped at 3s)", g, want)
	}
	if nonRetryable, _ := wantType(t, err, activities.ErrOperationPending); nonRetryable {
		t.Fatal("an exhausted retry of ABORTED is not a non-retryable error")
	}
	setFaults(t, a)

	p.Policy.Retry.MaximumAttempts = 0
	p.Policy.Retry.MaximumInterval = plans.Duration(time.Minute)
	p.Policy.Retry.TimeLimit = plans.Duration(5 * time.Second)
	a.Down()
	defer a.Up()
	attempts, err = runCall(t, st, activities.CallOptions(p, "a", activities.RPCProbe), activities.RPCProbe, in)
	// Starts at 0s, 1s, 3s; the next (7s) would pass the 5s time limit.
	if len(attempts) != 3 {
		t.Fatalf("%d attempts against a down site, want 3 within the 5s time limit", len(attempts))
	}
	if err == nil {
		t.Fatal("a down site answered")
	}
	if !strings.Contains(err.Error(), activities.RPCProbe) {
		t.Fatalf("error %v does not name the call", err)
	}
}
