package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "drover-sim-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "drover-sim")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		os.Stderr.Write(out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var freeAddr = simtest.FreeAddr

func TestBadInputExitsTwo(t *testing.T) {
	cases := [][]string{
		{"--no-such-flag"},
		{"--name", "x"}, // no addresses
		{"--name", "x", "--grpc", "127.0.0.1:1", "--data", "127.0.0.1:2", "--fault", "Promote:NOPE"},
		{"--config", "/nonexistent/sites.yaml"},
		{"--name", "x", "--grpc", "127.0.0.1:1", "--data", "127.0.0.1:2", "--secret", "novalue"},
	}
	for _, args := range cases {
		cmd := exec.Command(binary, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Errorf("%v: err = %v, want exit 2", args, err)
		}
		if stderr.Len() == 0 {
			t.Errorf("%v: no message on stderr", args)
		}
	}
}

// TestTwoProcesses runs each site in a process of its own, replicates
// between them, and stops them with SIGTERM.
func TestTwoProcesses(t *testing.T) {
	sock, err := os.MkdirTemp("", "dsimcmd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sock)
	dataE, dataW, ctlE := freeAddr(t), freeAddr(t), freeAddr(t)
	state := t.TempDir()
	start := func(args ...string) *exec.Cmd {
		cmd := exec.Command(binary, args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		return cmd
	}
	east := start("--name", "east", "--grpc", "unix://"+sock+"/east.sock", "--data", dataE, "--control", ctlE,
		"--peer", dataW, "--state-dir", filepath.Join(state, "east"), "--primary", "--groups", "2", "--interval", "50ms", "--log-level", "warn")
	west := start("--name", "west", "--grpc", "unix://"+sock+"/west.sock", "--data", dataW,
		"--peer", dataE, "--state-dir", filepath.Join(state, "west"), "--groups", "2", "--interval", "50ms", "--log-level", "warn")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix:"+sock+"/east.sock", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := replication.NewControllerClient(conn)
	src := &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: "vg-0001"}}}
	for {
		_, err = rc.EnableVolumeReplication(ctx, &replication.EnableVolumeReplicationRequest{ReplicationSource: src})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("enable: %v", err)
	}
	w, err := sim.NewClient(dataE, "127.0.0.2", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(ctx, "vg-0001-vol-1", 7, []byte("across processes")); err != nil {
		t.Fatal(err)
	}
	r, err := sim.NewClient(dataW, "127.0.0.3", "node-b")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []byte
	for ctx.Err() == nil {
		if got, err = r.Read(ctx, "vg-0001-vol-1", 7); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if string(got) != "across processes" {
		t.Fatalf("west read %q, %v", got, err)
	}
	st, err := sim.NewControl(ctlE).State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Site != "east" || len(st.Units) != 2 {
		t.Fatalf("control state: site %q, %d units", st.Site, len(st.Units))
	}
	for _, c := range []*exec.Cmd{east, west} {
		c.Process.Signal(syscall.SIGTERM)
		if err := c.Wait(); err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	}
	// Both left their state behind, and it checks out.
	se, err := sim.LoadState(filepath.Join(state, "east"))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := sim.LoadState(filepath.Join(state, "west"))
	if err != nil {
		t.Fatal(err)
	}
	if rep := sim.Check(se, sw); !rep.OK() || rep.Writes != 1 {
		t.Fatalf("%s", rep)
	}
	if !strings.HasPrefix(se.Units[0].ID, "vg-") {
		t.Fatalf("unexpected unit %q", se.Units[0].ID)
	}
}
