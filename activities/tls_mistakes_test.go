package activities_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// TestTLSMistakesAreFinal: every TLS misconfiguration between a plan and
// a site ends the call at once, in one attempt of a workflow's retry
// policy, with a final error that names the site, the endpoint and the
// field of storage.tls to fix: a wrong CA, a wrong server name, a missing
// or untrusted client certificate, a plaintext plan against a TLS
// endpoint and a TLS plan against a plaintext one.
func TestTLSMistakesAreFinal(t *testing.T) {
	server, client, wrong := pkiFiles(t)

	tlsAddr, plainAddr := simtest.FreeAddr(t), simtest.FreeAddr(t)
	simtest.StartPair(t, simtest.Options{
		TweakA: func(c *sim.Config) {
			c.GRPCAddr = tlsAddr
			c.TLS = &sim.TLSConfig{CertFile: server.Cert, KeyFile: server.Key, ClientCAFile: server.CA}
		},
		TweakB: func(c *sim.Config) { c.GRPCAddr = plainAddr },
	})
	st := newStorage(t)
	good := plans.TLS{CA: client.CA, Cert: client.Cert, Key: client.Key, ServerName: "localhost"}
	with := func(f func(*plans.TLS)) *plans.TLS { c := good; f(&c); return &c }

	for _, tc := range []struct {
		name  string
		addr  string
		tls   *plans.TLS
		field string
	}{
		{"wrong CA", tlsAddr, with(func(c *plans.TLS) { c.CA = wrong.CA }), "storage.tls.ca"},
		{"wrong server name", tlsAddr, with(func(c *plans.TLS) { c.ServerName = "storage.example.org" }), "storage.tls.serverName"},
		{"no client certificate", tlsAddr, with(func(c *plans.TLS) { c.Cert, c.Key = "", "" }), "storage.tls.cert"},
		{"untrusted client certificate", tlsAddr, with(func(c *plans.TLS) { c.Cert, c.Key = wrong.Cert, wrong.Key }), "storage.tls.cert"},
		{"plaintext plan, TLS endpoint", tlsAddr, nil, "storage.tls"},
		{"TLS plan, plaintext endpoint", plainAddr, &good, "storage.tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &plans.Plan{Sites: []plans.Site{{Name: "a", Storage: plans.Storage{Endpoint: tc.addr, TLS: tc.tls}}}}
			p.ApplyDefaults()
			attempts, err := runCall(t, st, activities.CallOptions(p, "a", activities.RPCProbe), activities.RPCProbe,
				activities.IdentityInput{Endpoint: endpoint(t, p, "a", activities.RPCProbe)})
			if len(attempts) != 1 {
				t.Errorf("%d attempts, want 1: a TLS mistake is final (%v)", len(attempts), err)
			}
			final, msg := wantType(t, err, activities.ErrTLS)
			if !final {
				t.Error("a TLS mistake must not be retried")
			}
			if !strings.Contains(msg, `site "a"`) || !strings.Contains(msg, tc.addr) || !strings.Contains(msg, tc.field) {
				t.Fatalf("message %q should name the site, the endpoint %s and %s", msg, tc.addr, tc.field)
			}
			t.Logf("%s", msg)
		})
	}
	// The right settings still connect on both.
	mustOK(t, callProbe(t, st, tlsAddr, &good))
}

// TestTLSFailureLeavesOtherCallsAlone: a call's TLS failure drops the
// cached connection for the next attempt without closing it under other
// calls on the same endpoint, which would fail with "the client
// connection is closing" instead of their own answer.
func TestTLSFailureLeavesOtherCallsAlone(t *testing.T) {
	server, _, wrong := pkiFiles(t)
	addr := simtest.FreeAddr(t)
	simtest.StartPair(t, simtest.Options{TweakA: func(c *sim.Config) {
		c.GRPCAddr = addr
		c.TLS = &sim.TLSConfig{CertFile: server.Cert, KeyFile: server.Key}
	}})
	st := newStorage(t)
	bad := &plans.TLS{CA: wrong.CA, ServerName: "localhost"}
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() { errs[i] = callProbe(t, st, addr, bad) })
	}
	wg.Wait()
	for i, err := range errs {
		var ae *temporal.ApplicationError
		if err == nil || !asApp(err, &ae) || ae.Type() != activities.ErrTLS || strings.Contains(err.Error(), "closing") {
			t.Fatalf("call %d: %v; want its own TLS failure", i, err)
		}
	}
}

// callProbe makes one Probe on addr with tls, outside any workflow.
func callProbe(t *testing.T, st *activities.Storage, addr string, tls *plans.TLS) error {
	t.Helper()
	_, err := st.Probe(ctxT(t), activities.IdentityInput{Endpoint: activities.Endpoint{Site: "a", Address: addr, TLS: tls}})
	return err
}

func asApp(err error, target **temporal.ApplicationError) bool { return errors.As(err, target) }
