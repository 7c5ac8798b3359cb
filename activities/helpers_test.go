package activities_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/grpc/codes"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/testpki"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// pairPlan is a plan over a simulated pair: sites "a" (primary) and "b",
// group "db" on the storage group vg-1, group "loose" of the volume "solo".
func pairPlan(a, b *simtest.Site) *plans.Plan {
	p := &plans.Plan{
		APIVersion: plans.APIVersion, Kind: plans.Kind, Metadata: plans.Metadata{Name: "test"},
		Sites: []plans.Site{
			{Name: "a", Storage: plans.Storage{Endpoint: a.Endpoint()}},
			{Name: "b", Storage: plans.Storage{Endpoint: b.Endpoint()}},
		},
		VolumeGroups: []plans.VolumeGroup{
			{Name: "db", Sites: map[string]plans.GroupRef{"a": {GroupID: "vg-1"}, "b": {GroupID: "vg-1"}}},
			{Name: "loose", Sites: map[string]plans.GroupRef{"a": {Volumes: []string{"solo"}}, "b": {Volumes: []string{"solo"}}}},
		},
	}
	p.ApplyDefaults()
	return p
}

func endpoint(t *testing.T, p *plans.Plan, site, rpc string) activities.Endpoint {
	t.Helper()
	e, err := activities.EndpointFor(p, site, rpc)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func groupInput(t *testing.T, p *plans.Plan, site, group, rpc string, force bool) activities.ReplicationInput {
	t.Helper()
	ins, err := activities.ReplicationInputs(p, site, group, rpc, force)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 {
		t.Fatalf("group %s on %s: %d inputs, want 1", group, site, len(ins))
	}
	return ins[0]
}

func newStorage(t *testing.T) *activities.Storage {
	t.Helper()
	s := activities.NewStorage()
	t.Cleanup(func() { s.Close() })
	return s
}

// activityEnv is Temporal's test activity environment with the storage
// activities registered.
func activityEnv(t *testing.T, s *activities.Storage) *testsuite.TestActivityEnvironment {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(s)
	return env
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantType checks that err is a Temporal application error of type typ
// and reports whether it is marked non-retryable.
func wantType(t *testing.T, err error, typ string) (nonRetryable bool, msg string) {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an application error", err, err)
	}
	if ae.Type() != typ {
		t.Fatalf("error type %q (%v), want %q", ae.Type(), err, typ)
	}
	return ae.NonRetryable(), ae.Error()
}

// faultCode is the simulator's spelling of a gRPC code (ABORTED, …).
func faultCode(c codes.Code) string {
	if c == codes.Canceled {
		return "CANCELLED" // gRPC's spelling
	}
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

var eventually = simtest.Eventually

func setFaults(t *testing.T, s *simtest.Site, rules ...sim.FaultRule) {
	t.Helper()
	if err := s.SetFaults(rules); err != nil {
		t.Fatal(err)
	}
}

// pkiFiles writes the key pairs of a storage server and a client signed by
// one CA, and one signed by another CA (wrong), into a temporary folder.
func pkiFiles(t *testing.T) (server, client, wrong testpki.Files) {
	t.Helper()
	dir := t.TempDir()
	ca, err := testpki.NewCA("storage-ca")
	mustOK(t, err)
	server, err = ca.WriteFiles(dir, "server")
	mustOK(t, err)
	client, err = ca.WriteFiles(dir, "client")
	mustOK(t, err)
	impostor, err := testpki.NewCA("impostor")
	mustOK(t, err)
	wrong, err = impostor.WriteFiles(dir, "wrong")
	mustOK(t, err)
	return server, client, wrong
}
