package main_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sys/unix"

	"github.com/drover-dr/drover/internal/bintest"
	"github.com/drover-dr/drover/internal/devserver"
	"github.com/drover-dr/drover/internal/simtest"
)

// TestListenerRefusesPasswordsInClear: a web configuration with basic
// auth and no TLS would have Prometheus send its password in clear; the
// worker refuses to start (exit 2) and says what to add.
func TestListenerRefusesPasswordsInClear(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret-scrape"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "web.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "basic_auth_users:\n  prometheus: %s\n", hash), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--metrics", simtest.FreeAddr(t), "--web-config", cfg, "--allow-unsigned-plans", "--connect-timeout", "2s")
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+simtest.FreeAddr(t))
	out, err := cmd.CombinedOutput()
	if code := bintest.ExitCode(err); code != 2 || !strings.Contains(string(out), "basic_auth_users without tls_server_config") ||
		!strings.Contains(string(out), "add tls_server_config") {
		t.Fatalf("basic auth without TLS: exit %d, output:\n%s\nwant exit 2 naming the fix", code, out)
	}
}

// TestListenerChecksTheHost: the endpoint answers requests for the
// loopback's names, its own address and the names given with
// --allowed-host, and 421 to any other: a page on a rebound DNS name
// reads neither /metrics nor /codec. On the loopback the worker does not
// warn about being exposed.
func TestListenerChecksTheHost(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	addr := simtest.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	// Temporal never answers: the endpoint serves while the worker waits.
	w := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + simtest.FreeAddr(t)}, bin, "--metrics", addr,
		"--allowed-host", "worker-1.example", "--connect-timeout", "2m", "--allow-unsigned-plans")
	simtest.Eventually(t, 30*time.Second, "the HTTP endpoint", func() bool { return strings.Contains(w.Log.String(), "HTTP endpoint") })
	get := func(method, path, host string) int {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader("{}"))
		req.Host = host
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("%s %s for %s: %v", method, path, host, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{addr, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "worker-1.example:" + port} {
		if code := get(http.MethodGet, "/healthz", host); code != http.StatusOK {
			t.Errorf("/healthz for Host %q: %d, want 200", host, code)
		}
	}
	for _, host := range []string{"rebound.attacker.example:" + port, "rebound.attacker.example", "10.0.0.7:" + port, "worker-1.example.attacker.example"} {
		for _, path := range []string{"/metrics", "/healthz"} {
			if code := get(http.MethodGet, path, host); code != http.StatusMisdirectedRequest {
				t.Errorf("%s for Host %q: %d, want 421", path, host, code)
			}
		}
		if code := get(http.MethodPost, "/codec/decode", host); code != http.StatusMisdirectedRequest {
			t.Errorf("/codec/decode for Host %q: %d, want 421", host, code)
		}
	}
	if strings.Contains(w.Log.String(), "beyond the loopback") {
		t.Errorf("a warning about exposure on the loopback:\n%s", w.Log)
	}
}

// TestListenerFailureStopsTheWorker: when the HTTP endpoint's listener
// fails (here its socket is shut down under it), the worker does not go
// on without health checks or metrics: it says so in its log and exits
// 1, whether it still waits for Temporal or runs.
func TestListenerFailureStopsTheWorker(t *testing.T) {
	bin := filepath.Join(bintest.Build(t, "worker"), "worker")
	for _, c := range []struct {
		name    string
		started bool
	}{{"while it waits for Temporal", false}, {"while it runs", true}} {
		t.Run(c.name, func(t *testing.T) {
			temporal := simtest.FreeAddr(t)
			if c.started {
				temporal = devserver.Start(t, nil).Address()
			}
			addr := simtest.FreeAddr(t)
			w := bintest.Start(t, []string{"TEMPORAL_ADDRESS=" + temporal}, bin, "--metrics", addr,
				"--connect-timeout", "2m", "--allow-unsigned-plans")
			simtest.Eventually(t, 30*time.Second, "the HTTP endpoint", func() bool {
				resp, err := http.Get("http://" + addr + "/healthz")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
			if c.started {
				simtest.Eventually(t, time.Minute, "the worker to start", func() bool { return strings.Contains(w.Log.String(), "worker started") })
			}
			shutdownListener(t, w.Cmd.Process.Pid, addr)
			ended, err := w.Wait(30 * time.Second)
			if !ended {
				t.Fatalf("the worker goes on after its listener failed:\n%s", w.Log)
			}
			if code := bintest.ExitCode(err); code != 1 || !strings.Contains(w.Log.String(), "the HTTP endpoint failed") {
				t.Fatalf("after its listener failed: exit %d, log:\n%s\nwant exit 1 and the failure logged", code, w.Log)
			}
		})
	}
}

// shutdownListener shuts down the listening socket of process pid on
// addr, from a copy of its descriptor (pidfd_getfd): the process's
// accept then fails as it would on a socket that broke.
func shutdownListener(t *testing.T, pid int, addr string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	inode := listeningInode(t, pid, p)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	target := -1
	for _, e := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); err == nil && l == "socket:["+inode+"]" {
			target, _ = strconv.Atoi(e.Name())
		}
	}
	if target < 0 {
		t.Fatalf("no descriptor of process %d is the socket listening on %s", pid, addr)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, target, 0)
	if err != nil {
		t.Skipf("pidfd_getfd (needs the right to trace the worker): %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil {
		t.Fatalf("shutdown the worker's listener: %v", err)
	}
}

// listeningInode is the inode of the socket listening on 127.0.0.1:port
// in pid's network namespace.
func listeningInode(t *testing.T, pid, port int) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	local := fmt.Sprintf("0100007F:%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 9 && fs[1] == local && fs[3] == "0A" { // 0A: LISTEN
			return fs[9]
		}
	}
	t.Fatalf("nothing listens on 127.0.0.1:%d", port)
	return ""
}
