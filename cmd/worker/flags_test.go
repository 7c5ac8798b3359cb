package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEndpointOnLoopbackByDefault: without --metrics the worker's HTTP
// endpoint (metrics, health, codec) listens on loopback only
// (SECURITY.md), and a Protect gauge stays 15 minutes by default.
func TestEndpointOnLoopbackByDefault(t *testing.T) {
	c, err := parse([]string{"--allow-unsigned-plans"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(c.metrics)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Fatalf("the default endpoint is %q, want a loopback address", c.metrics)
	}
	if c.metricsTTL != 15*time.Minute {
		t.Fatalf("--metrics-ttl defaults to %v, want 15m", c.metricsTTL)
	}
	if _, err := parse([]string{"--allow-unsigned-plans", "--metrics-ttl", "0s"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--metrics-ttl 0s: want a positive duration") {
		t.Fatalf("--metrics-ttl 0s: %v, want refused", err)
	}
}

// TestVersioningFlags: the workflow worker is a version of deployment
// drover by default, its build ID the module version and revision; a
// deployment name or build ID Temporal would refuse is refused at start,
// and a site worker, which runs activities only, stays unversioned.
func TestVersioningFlags(t *testing.T) {
	c, err := parse([]string{"--allow-unsigned-plans"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d := deploymentOptions(c)
	if !d.UseVersioning || d.Version.DeploymentName != "drover" || d.Version.BuildID == "" || c.makeCurrent != "if-unattended" {
		t.Fatalf("default deployment options %+v (make current %s): want a version of drover with a build ID, current if unattended", d, c.makeCurrent)
	}
	for _, args := range [][]string{{"--deployment-name", "dr.over"}, {"--build-id", ""}, {"--build-id", "a/b"}, {"--make-current", "always"}, {"--unattended-after", "0s"}} {
		if _, err := parse(append([]string{"--allow-unsigned-plans"}, args...), io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	for _, args := range [][]string{{"--site", "east"}, {"--allow-unsigned-plans", "--versioning=false"}} {
		c, err := parse(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if deploymentOptions(c).UseVersioning {
			t.Errorf("%v: a versioned worker", args)
		}
	}
}

type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }

// TestExposedEndpointWarns: an endpoint beyond the loopback with no
// password and no client certificate gets a warning that names the fix;
// one on the loopback, or that asks who calls, none.
func TestExposedEndpointWarns(t *testing.T) {
	for _, c := range []struct {
		addr string
		ws   webSettings
		warn bool
	}{
		{"127.0.0.1:9464", webSettings{}, false},
		{"[::1]:9464", webSettings{}, false},
		{"0.0.0.0:9464", webSettings{}, true},
		{"[::]:9464", webSettings{}, true},
		{"10.1.2.3:9464", webSettings{tls: true}, true},
		{"0.0.0.0:9464", webSettings{tls: true, basicAuth: true}, false},
		{"0.0.0.0:9464", webSettings{tls: true, clientCert: true}, false},
	} {
		got := exposed(addr(c.addr), c.ws)
		if (got != "") != c.warn || c.warn && !strings.Contains(got, "--web-config") {
			t.Errorf("%s %+v: warning %q, want one: %v", c.addr, c.ws, got, c.warn)
		}
	}
}

// TestEndpointOnAllAddressesAnswersToTheMachines: listening on every
// address, the endpoint answers to each of the machine's addresses (a
// Nomad check or a scrape by address), still not to another name.
func TestEndpointOnAllAddressesAnswersToTheMachines(t *testing.T) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	var own string
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			own = n.IP.String()
		}
	}
	hosts := allowedHosts(addr("0.0.0.0:9464"), []string{"Worker.Example"})
	h := checkHost(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), hosts)
	for host, want := range map[string]int{"worker.example:9464": 200, "127.0.0.2:9464": 200, "0.0.0.0:9464": 421, "attacker.example": 421} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Host = host
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %q: %d, want %d", host, rec.Code, want)
		}
	}
	if own != "" {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Host = net.JoinHostPort(own, "9464")
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Errorf("Host %q (the machine's own address): %d, want 200", req.Host, rec.Code)
		}
	}
}

// TestRecordKeyFlags: the record key comes from --record-key FILE (or
// DROVER_RECORD_KEY_FILE), or, as a Nomad Variable's item becomes, from
// DROVER_RECORD_KEY itself; a key under 32 bytes is refused; without
// any the worker has none (and makes its own at start).
func TestRecordKeyFlags(t *testing.T) {
	t.Setenv("DROVER_RECORD_KEY_FILE", "")
	t.Setenv("DROVER_RECORD_KEY", "")
	c, err := parse([]string{"--allow-unsigned-plans"}, io.Discard)
	if err != nil || c.recordSecret != nil {
		t.Fatalf("no key given: %v, key %q", err, c.recordSecret)
	}
	file := filepath.Join(t.TempDir(), "record.key")
	if err := os.WriteFile(file, []byte(strings.Repeat("f", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := parse([]string{"--allow-unsigned-plans", "--record-key", file}, io.Discard); err != nil || string(c.recordSecret) != strings.Repeat("f", 40) {
		t.Fatalf("--record-key: %v, key %q", err, c.recordSecret)
	}
	t.Setenv("DROVER_RECORD_KEY", strings.Repeat("e", 32))
	if c, err := parse([]string{"--allow-unsigned-plans"}, io.Discard); err != nil || string(c.recordSecret) != strings.Repeat("e", 32) {
		t.Fatalf("DROVER_RECORD_KEY: %v, key %q", err, c.recordSecret)
	}
	t.Setenv("DROVER_RECORD_KEY", "short")
	if _, err := parse([]string{"--allow-unsigned-plans"}, io.Discard); err == nil || !strings.Contains(err.Error(), "want at least 32") {
		t.Fatalf("a short DROVER_RECORD_KEY: %v, want it refused", err)
	}
	if err := os.WriteFile(file, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parse([]string{"--allow-unsigned-plans", "--record-key", file}, io.Discard); err == nil || !strings.Contains(err.Error(), "want at least 32") {
		t.Fatalf("a short --record-key: %v, want it refused", err)
	}
}
