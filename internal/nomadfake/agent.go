package nomadfake

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/drover-dr/drover/internal/freeport"
)

// Agent starts a real `nomad agent -dev` on loopback, with the raw_exec
// driver enabled, and returns its address; it stops when the test ends.
// Without a nomad binary on PATH the test is skipped, saying so.
func Agent(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad binary on PATH: the run against a real Nomad agent is skipped (the fake agent run covers the same test)")
	}
	dir := t.TempDir()
	ports := make([]int, 3)
	for i := range ports {
		port, err := freeport.Port("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = port
	}
	conf := fmt.Sprintf(`bind_addr = "127.0.0.1"
ports {
  http = %d
  rpc  = %d
  serf = %d
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
client {
  options {
    # No cloud metadata probes: they only slow the start on a machine
    # outside a cloud, and fail it where the metadata address is blocked.
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
`, ports[0], ports[1], ports[2])
	cfg := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "agent", "-dev", "-config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s agent -dev: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logf.Close()
	})
	addr := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		select {
		case <-done:
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("nomad agent -dev exited early:\n%s", log)
		case <-time.After(250 * time.Millisecond):
		}
		if nodeReady(ctx, addr) {
			return addr
		}
	}
	t.Fatalf("nomad agent -dev at %s has no ready node after 90s", addr)
	return ""
}

func nodeReady(ctx context.Context, addr string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/v1/nodes", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var nodes []struct{ Status string }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&nodes) != nil {
		return false
	}
	for _, n := range nodes {
		if n.Status == "ready" {
			return true
		}
	}
	return false
}
