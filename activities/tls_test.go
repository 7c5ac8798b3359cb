package activities_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-dr/drover/activities"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/plans"
	"github.com/drover-dr/drover/sim"
)

// TestTLS: a site serving mutual TLS over TCP. The right CA and client
// certificate connect; a wrong CA, an unreadable CA file and a certificate
// without its key each fail at once with a clear, final TLSFailure (no
// retry can fix them). TestTLSMistakesAreFinal covers the rest: server
// name, client certificate, and plaintext against TLS either way.
func TestTLS(t *testing.T) {
	server, client, wrong := pkiFiles(t)

	addr := simtest.FreeAddr(t)
	a, _ := simtest.StartPair(t, simtest.Options{TweakA: func(c *sim.Config) {
		c.GRPCAddr = addr
		c.TLS = &sim.TLSConfig{CertFile: server.Cert, KeyFile: server.Key, ClientCAFile: server.CA}
	}})
	if a.Endpoint() != addr {
		t.Fatalf("site a serves on %s, want TCP %s", a.Endpoint(), addr)
	}
	st := newStorage(t)
	env := activityEnv(t, st)
	call := func(tls *plans.TLS) error {
		e := activities.Endpoint{Site: "a", Address: addr, TLS: tls}
		_, err := env.ExecuteActivity(st.GetIdentity, activities.IdentityInput{Endpoint: e})
		return err
	}

	mustOK(t, call(&plans.TLS{CA: client.CA, Cert: client.Cert, Key: client.Key, ServerName: "localhost"}))

	for _, tc := range []struct {
		name string
		tls  *plans.TLS
		want string
	}{
		{"wrong CA", &plans.TLS{CA: wrong.CA, Cert: client.Cert, Key: client.Key, ServerName: "localhost"}, "x509"},
		{"unreadable CA", &plans.TLS{CA: filepath.Join(t.TempDir(), "missing.pem")}, "read CA file"},
		{"cert without key", &plans.TLS{CA: client.CA, Cert: client.Cert}, "needs both cert and key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := call(tc.tls)
			final, msg := wantType(t, err, activities.ErrTLS)
			if !final {
				t.Fatal("a TLS failure must not be retried")
			}
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, `site "a"`) || !strings.Contains(msg, activities.RPCGetIdentity) {
				t.Fatalf("message %q should name the RPC, the site and %q", msg, tc.want)
			}
		})
	}

	// In a workflow, the wrong CA costs exactly one attempt.
	p := &plans.Plan{Sites: []plans.Site{{Name: "a", Storage: plans.Storage{Endpoint: addr,
		TLS: &plans.TLS{CA: wrong.CA, Cert: client.Cert, Key: client.Key, ServerName: "localhost"}}}}}
	p.ApplyDefaults()
	attempts, err := runCall(t, st, activities.CallOptions(p, "a", activities.RPCProbe), activities.RPCProbe,
		activities.IdentityInput{Endpoint: endpoint(t, p, "a", activities.RPCProbe)})
	if len(attempts) != 1 {
		t.Fatalf("%d attempts with a wrong CA, want 1", len(attempts))
	}
	wantType(t, err, activities.ErrTLS)
}
