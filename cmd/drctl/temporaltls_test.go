package main_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/internal/testpki"
	"github.com/drover-dr/drover/sim"
)

// rawCodec passes gRPC messages through as bytes, for a front that
// forwards calls it does not decode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// tlsFront is a Temporal frontend that takes TLS only, as Temporal Cloud
// or a server with global.tls does: with clientCA set it asks for a
// client certificate signed by it (mutual TLS), with apiKey set it
// refuses each call whose authorization is not that key. The calls it
// accepts it passes to the dev server behind it, and counts.
type tlsFront struct {
	addr     string
	accepted atomic.Int64
	refused  atomic.Int64
}

func startTLSFront(t *testing.T, backend string, ca *testpki.CA, clientCA *x509.CertPool, apiKey string) *tlsFront {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue("temporal-front")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if clientCA != nil {
		cfg.ClientCAs, cfg.ClientAuth = clientCA, tls.RequireAndVerifyClientCert
	}
	up, err := grpc.NewClient(backend, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFront{}
	pass := func(_ any, in grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(in)
		md, _ := metadata.FromIncomingContext(in.Context())
		if apiKey != "" && (len(md.Get("authorization")) != 1 || md.Get("authorization")[0] != "Bearer "+apiKey) {
			f.refused.Add(1)
			return status.Error(codes.Unauthenticated, "Request unauthorized.")
		}
		f.accepted.Add(1)
		fwd := metadata.MD{}
		for k, v := range md {
			if !strings.HasPrefix(k, ":") && !strings.HasPrefix(k, "grpc-") && k != "authorization" && k != "content-type" && k != "user-agent" && k != "te" {
				fwd[k] = v
			}
		}
		out, err := up.NewStream(metadata.NewOutgoingContext(in.Context(), fwd),
			&grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(rawCodec{}))
		if err != nil {
			return err
		}
		go func() {
			for {
				var m []byte
				if err := in.RecvMsg(&m); err != nil {
					_ = out.CloseSend()
					return
				}
				if out.SendMsg(&m) != nil {
					return
				}
			}
		}()
		if h, err := out.Header(); err == nil {
			_ = in.SendHeader(h)
		}
		for {
			var m []byte
			if err := out.RecvMsg(&m); err != nil {
				in.SetTrailer(out.Trailer())
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if err := in.SendMsg(&m); err != nil {
				return err
			}
		}
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)), grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(pass))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		_ = up.Close()
	})
	f.addr = lis.Addr().String()
	return f
}

// TestTemporalOverTLS: the worker and drctl reach a Temporal frontend
// that takes TLS only, as docs/guides/deploy-nomad.md's "TLS or API keys" says: with an API
// key (TEMPORAL_API_KEY, or drctl's --api-key) and with mutual TLS
// (TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH, or
// drctl's --tls-cert-path and --tls-key-path), a private CA given by
// TEMPORAL_TLS_SERVER_CA_CERT_PATH or --tls-ca-path. A failover goes
// through both: drctl starts it through one front, the central worker
// runs it through the other, a site worker makes west's calls through
// the first. Without the key, the certificate or TLS, drctl is refused.
func TestTemporalOverTLS(t *testing.T) {
	bins := bintest.Build(t, "drctl", "worker")
	srv := devserver.Start(t, nil)
	dir := t.TempDir()
	ca, client := testpki.NewFiles(t, "drover test CA", dir, "drover")
	// A certificate of another CA, which the mutual-TLS front must refuse.
	_, stranger := testpki.NewFiles(t, "another CA", dir, "stranger")
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	const key = "drover-test-api-key-1"
	keyed := startTLSFront(t, srv.Address(), ca, nil, key)
	mutual := startTLSFront(t, srv.Address(), ca, pool, "")

	east, west := eastWest(t)
	shopFile := onePlan(t, filepath.Join(dir, "shop.yaml"), "shop", east, west, "{cidrs: ["+simtest.NodeA+"/32]}", "")
	b, _ := os.ReadFile(shopFile)
	siteQueue := strings.Replace(string(b), "  - name: west\n", "  - name: west\n    taskQueue: drover-site-west\n", 1)
	if siteQueue == string(b) {
		t.Fatal("the plan's west site is not where the test looks for it")
	}
	if err := os.WriteFile(shopFile, []byte(siteQueue), 0o644); err != nil {
		t.Fatal(err)
	}

	// The central worker by mutual TLS, the site worker by API key.
	caEnv := "TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + client.CA
	central := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + mutual.addr, "TEMPORAL_NAMESPACE=default", caEnv,
		"TEMPORAL_TLS_CLIENT_CERT_PATH=" + client.Cert, "TEMPORAL_TLS_CLIENT_KEY_PATH=" + client.Key},
		filepath.Join(bins, "worker"), "--metrics", "", "--allow-unsigned-plans")
	readyz := simtest.FreeAddr(t)
	site := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + keyed.addr, "TEMPORAL_NAMESPACE=default", caEnv, "TEMPORAL_API_KEY=" + key},
		filepath.Join(bins, "worker"), "--metrics", readyz, "--site", "west")
	simtest.Eventually(t, time.Minute, "the central worker to start", func() bool { return strings.Contains(central.Log.String(), "worker started") })
	// Ready: Temporal lists the site worker polling its queue.
	simtest.Eventually(t, time.Minute, "the site worker to be ready", func() bool {
		resp, err := http.Get("http://" + readyz + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if keyed.accepted.Load() == 0 || mutual.accepted.Load() == 0 {
		t.Fatalf("the fronts passed %d (API key) and %d (mutual TLS) calls: a worker went around them", keyed.accepted.Load(), mutual.accepted.Load())
	}

	// drctl by API key, from the environment: protection, then the
	// failover, complete.
	byKey := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: keyed.addr, env: []string{caEnv, "TEMPORAL_API_KEY=" + key}}
	byKey.ok(nil, "protect", "start", shopFile, "--primary", "east", "--interval", "200ms")
	byKey.eventually("protection from east", "shop", func(s statusOut) bool {
		return s.Protection != nil && s.Protection.Primary == "east" && !s.Protection.Groups["db"].LastSync.IsZero()
	})
	if code, out, errs := byKey.run("failover", shopFile, "--to", "west", "--yes", "--wait"); code != 0 {
		t.Fatalf("drctl failover by API key: exit %d\n%s\n%s\ncentral worker:\n%s\nsite worker:\n%s", code, out, errs, central.Log, site.Log)
	}
	if u := west.Snapshot().Unit("vg/vg-1"); u == nil || u.Role != sim.RolePrimary {
		t.Fatalf("after the failover west's vg-1 is %+v, want primary", u)
	}
	// drctl by mutual TLS, from its flags: status reads what it did.
	byCert := cli{t: t, bin: filepath.Join(bins, "drctl"), addr: mutual.addr}
	code, out, errs := byCert.run("--tls-ca-path", client.CA, "--tls-cert-path", client.Cert, "--tls-key-path", client.Key, "status", "shop")
	if code != 0 || !strings.Contains(out, "last action: Failover, completed") {
		t.Fatalf("drctl status by mutual TLS: exit %d\n%s\n%s", code, out, errs)
	}
	// And --api-key as a flag.
	if code, out, errs := (cli{t: t, bin: byKey.bin, addr: keyed.addr}).run("--tls-ca-path", client.CA, "--api-key", key, "list"); code != 0 || !strings.Contains(out, "Failover") {
		t.Fatalf("drctl list --api-key: exit %d\n%s\n%s", code, out, errs)
	}

	// Refused: a wrong key, no key, no client certificate, a certificate of
	// another CA, no TLS at all. Each ends with an error, never an answer.
	refusedBefore := keyed.refused.Load()
	// The hint says what to look at: the credentials, the CA, TLS.
	const creds, handshake, tlsOnly, clientCert = "refused drctl's credentials", "give the CA that signs", "needs --tls (TEMPORAL_TLS=true)", "a client certificate it accepts (--tls-cert-path"
	for _, c := range []struct {
		name, addr string
		env        []string
		hint       string
	}{
		{"a wrong API key", keyed.addr, []string{caEnv, "TEMPORAL_API_KEY=not-the-key"}, creds},
		{"no API key", keyed.addr, []string{caEnv, "TEMPORAL_TLS=true"}, creds},
		{"no client certificate", mutual.addr, []string{caEnv, "TEMPORAL_TLS=true"}, clientCert},
		{"a certificate of another CA", mutual.addr, []string{caEnv, "TEMPORAL_TLS_CLIENT_CERT_PATH=" + stranger.Cert, "TEMPORAL_TLS_CLIENT_KEY_PATH=" + stranger.Key}, clientCert},
		{"no TLS", mutual.addr, nil, tlsOnly},
		{"the front's CA not given", mutual.addr, []string{"TEMPORAL_TLS_CLIENT_CERT_PATH=" + client.Cert, "TEMPORAL_TLS_CLIENT_KEY_PATH=" + client.Key}, handshake},
	} {
		cc := cli{t: t, bin: byKey.bin, addr: c.addr, env: c.env}
		code, out, errs := cc.run("status", "shop")
		if code != 3 || strings.Contains(out, "Failover") || !strings.Contains(errs, c.hint) {
			t.Errorf("drctl with %s: exit %d, want 3 and a hint with %q\n%s\n%s", c.name, code, c.hint, out, errs)
		}
		t.Logf("drctl with %s: exit %d: %.400s", c.name, code, errs)
	}
	if n := keyed.refused.Load() - refusedBefore; n < 2 {
		t.Errorf("the API-key front refused %d calls for the wrong and the missing key, want at least 2", n)
	}
}
