package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The network of TestSitesAsNetworks: one network namespace per site and
// one for the WAN, all named drsite-PID-…, made and deleted by the test
// itself. Each site's namespace has one veth into a bridge in the WAN's;
// the WAN's end of each carries 20 ms of netem delay, so a packet from
// one site to the other waits 20 ms and a round trip 40. Cutting a site
// off sets its WAN-side veth down: its processes go on, packets to and
// from it are dropped, and nothing tells either side.

// wanDelay is the one-way delay of the WAN.
const wanDelay = "20ms"

// netnsPrefix starts the names of this process's namespaces.
func netnsPrefix() string { return fmt.Sprintf("drsite-%d-", os.Getpid()) }

// ipCmd runs ip (or tc) with args, failing with its output.
func ipCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// canNetns says why network namespaces cannot be made here ("" when they
// can): the test must run as root with ip and tc.
func canNetns() string {
	if os.Geteuid() != 0 {
		return "not root: network namespaces, veth pairs and netem need root"
	}
	for _, tool := range []string{"ip", "tc", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed"
		}
	}
	probe := netnsPrefix() + "probe"
	if err := ipCmd("ip", "netns", "add", probe); err != nil {
		return "ip netns does not work here: " + err.Error()
	}
	_ = ipCmd("ip", "netns", "del", probe)
	return ""
}

// sweepStaleNetns deletes namespaces of earlier runs of this test whose
// process is gone (a run killed before its clean-up).
func sweepStaleNetns() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, "drsite-")
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = ipCmd("ip", "netns", "del", name)
		}
	}
}

// wan is the test's network: the WAN namespace with its bridge, and one
// namespace per site joined to it.
type wan struct {
	ns    string // the WAN's namespace
	sites map[string]*siteNet
	made  []string // namespaces made, for close
	// noDelay says why the WAN has no delay ("" when it has).
	noDelay string
}

// siteNet is one site's namespace: its host address (every service of
// the site listens there) and its client address (the application's
// nodes, which a fence names).
type siteNet struct {
	name, ns     string
	host, client string
	// wanIf is the site's veth end in the WAN's namespace.
	wanIf string
	// temporal is where the site's worker and drctl find Temporal: the
	// site itself, or a third location.
	temporal *siteNet
}

// newWAN makes the WAN namespace and its bridge.
func newWAN() (*wan, error) {
	w := &wan{ns: netnsPrefix() + "wan", sites: map[string]*siteNet{}}
	if err := w.addNS(w.ns); err != nil {
		return w, err
	}
	for _, args := range [][]string{
		{"-n", w.ns, "link", "add", "br0", "type", "bridge"},
		{"-n", w.ns, "link", "set", "br0", "up"},
	} {
		if err := ipCmd("ip", args...); err != nil {
			return w, err
		}
	}
	return w, nil
}

func (w *wan) addNS(name string) error {
	if err := ipCmd("ip", "netns", "add", name); err != nil {
		return err
	}
	w.made = append(w.made, name)
	return ipCmd("ip", "-n", name, "link", "set", "lo", "up")
}

// addSite makes a site's namespace with host and client addresses
// (10.213.0.0/24) and joins it to the bridge through a veth whose WAN
// end delays by wanDelay.
func (w *wan) addSite(name string, n int) (*siteNet, error) {
	s := &siteNet{name: name, ns: netnsPrefix() + name, host: fmt.Sprintf("10.213.0.%d", n), client: fmt.Sprintf("10.213.0.%d", 100+n)}
	s.temporal = s
	if err := w.addNS(s.ns); err != nil {
		return s, err
	}
	// Interface names are at most 15 bytes and live in the namespaces:
	// they need not be unique beyond them, but are made in the WAN's.
	s.wanIf = "w-" + name
	in := "s-" + name
	for _, args := range [][]string{
		{"-n", w.ns, "link", "add", s.wanIf, "type", "veth", "peer", "name", in, "netns", s.ns},
		{"-n", w.ns, "link", "set", s.wanIf, "master", "br0"},
		{"-n", w.ns, "link", "set", s.wanIf, "up"},
		{"-n", s.ns, "addr", "add", s.host + "/24", "dev", in},
		{"-n", s.ns, "addr", "add", s.client + "/24", "dev", in},
		{"-n", s.ns, "link", "set", in, "up"},
	} {
		if err := ipCmd("ip", args...); err != nil {
			return s, err
		}
	}
	w.sites[name] = s
	if err := ipCmd("ip", "netns", "exec", w.ns, "tc", "qdisc", "add", "dev", s.wanIf, "root", "netem", "delay", wanDelay); err != nil {
		// A kernel built without sch_netem: the WAN has no delay.
		if strings.Contains(err.Error(), "qdisc kind is unknown") {
			w.noDelay = "this kernel has no netem (CONFIG_NET_SCH_NETEM): the WAN runs without its delay"
			return s, nil
		}
		return s, err
	}
	return s, nil
}

// delay is the WAN's one-way delay as made.
func (w *wan) delay() string {
	if w.noDelay != "" {
		return "not at all (no netem)"
	}
	return wanDelay + " each way"
}

// cut takes a site off the WAN: its processes run on, its packets are
// dropped. heal brings the link back.
func (w *wan) cut(site string) error {
	return ipCmd("ip", "-n", w.ns, "link", "set", w.sites[site].wanIf, "down")
}

func (w *wan) heal(site string) error {
	return ipCmd("ip", "-n", w.ns, "link", "set", w.sites[site].wanIf, "up")
}

// close deletes every namespace made, and with them the veths and the
// bridge.
func (w *wan) close() error {
	var errs []error
	for i := len(w.made) - 1; i >= 0; i-- {
		if err := ipCmd("ip", "netns", "del", w.made[i]); err != nil {
			errs = append(errs, err)
		}
	}
	w.made = nil
	return errors.Join(errs...)
}

// dialer dials from inside a namespace: the socket is made on a thread
// moved into it, and stays there after the thread moves back. from, when
// set, is the source address.
func dialer(ns, from string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			c, err, restored := dialIn(ctx, ns, from, network, addr)
			if restored {
				runtime.UnlockOSThread()
			} // else the thread ends with the goroutine, still locked
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// dialIn dials in namespace ns on the locked calling thread and moves
// the thread back; restored says whether it could.
func dialIn(ctx context.Context, ns, from, network, addr string) (net.Conn, error, bool) {
	self, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), syscall.Gettid()))
	if err != nil {
		return nil, err, true
	}
	defer self.Close()
	target, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		return nil, err, true
	}
	defer target.Close()
	if err := setns(target); err != nil {
		return nil, fmt.Errorf("enter namespace %s: %w", ns, err), true
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.DialContext(ctx, network, addr)
	return c, err, setns(self) == nil
}

func setns(f *os.File) error {
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}
