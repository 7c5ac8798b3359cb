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
// itself. Each site's namespace has one veth into the WAN's, whose ends
// there the hub (hub_test.go) joins: a frame from one site reaches the
// other 20 ms later, so a round trip takes 40. Cutting a site off sets
// its WAN-side veth down: its processes go on, packets to and from it
// are dropped, and nothing tells either side.

// wanDelay is the one-way delay of the WAN.
const wanDelay = 20 * time.Millisecond

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
// can): the test must run as root with ip.
func canNetns() string {
	if os.Geteuid() != 0 {
		return "not root: network namespaces, veth pairs and packet sockets need root"
	}
	for _, tool := range []string{"ip", "setpriv"} {
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

// wan is the test's network: the WAN namespace with its hub, and one
// namespace per site joined to it.
type wan struct {
	ns    string // the WAN's namespace
	hub   *hub
	sites map[string]*siteNet
	made  []string // namespaces made, for close
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

// newWAN makes the WAN namespace and its hub.
func newWAN() (*wan, error) {
	w := &wan{ns: netnsPrefix() + "wan", hub: newHub(wanDelay), sites: map[string]*siteNet{}}
	return w, w.addNS(w.ns)
}

func (w *wan) addNS(name string) error {
	if err := ipCmd("ip", "netns", "add", name); err != nil {
		return err
	}
	w.made = append(w.made, name)
	return ipCmd("ip", "-n", name, "link", "set", "lo", "up")
}

// addSite makes a site's namespace with host and client addresses
// (10.213.0.0/24) and joins it to the hub through a veth.
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
	return s, w.hub.attach(w.ns, s.wanIf)
}

// cut takes a site off the WAN: its processes run on, its packets are
// dropped. heal brings the link back.
func (w *wan) cut(site string) error {
	return ipCmd("ip", "-n", w.ns, "link", "set", w.sites[site].wanIf, "down")
}

func (w *wan) heal(site string) error {
	return ipCmd("ip", "-n", w.ns, "link", "set", w.sites[site].wanIf, "up")
}

// close stops the hub and deletes every namespace made, and with them
// the veths.
func (w *wan) close() error {
	w.hub.close()
	var errs []error
	for i := len(w.made) - 1; i >= 0; i-- {
		if err := ipCmd("ip", "netns", "del", w.made[i]); err != nil {
			errs = append(errs, err)
		}
	}
	w.made = nil
	return errors.Join(errs...)
}

// dialer dials from inside a namespace (the socket stays there). from,
// when set, is the source address.
func dialer(ns, from string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNetns(ns, func() error {
			d := net.Dialer{Timeout: 5 * time.Second}
			if from != "" {
				d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
			}
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// inNetns runs f on a thread moved into namespace ns, then moves the
// thread back; what f makes (a socket) stays in ns. A thread that could
// not move back ends with its goroutine, still locked.
func inNetns(ns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err, restored := inNetnsLocked(ns, f)
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// inNetnsLocked is inNetns on the locked calling thread; restored says
// whether the thread is back in its own namespace.
func inNetnsLocked(ns string, f func() error) (error, bool) {
	self, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), syscall.Gettid()))
	if err != nil {
		return err, true
	}
	defer self.Close()
	target, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		return err, true
	}
	defer target.Close()
	if err := setns(target); err != nil {
		return fmt.Errorf("enter namespace %s: %w", ns, err), true
	}
	err = f()
	return err, setns(self) == nil
}

func setns(f *os.File) error {
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}

// roundTrip measures the WAN's round trip from one site to another: the
// least of five TCP connects (a SYN out, its SYN-ACK back) to a listener
// the test opens at the far site for the purpose.
func (w *wan) roundTrip(from, to *siteNet) (time.Duration, error) {
	var l net.Listener
	if err := inNetns(to.ns, func() error {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(to.host, "0"))
		return err
	}); err != nil {
		return 0, err
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dial := dialer(from.ns, from.host)
	least := time.Duration(0)
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		c, err := dial(ctx, "tcp", l.Addr().String())
		took := time.Since(start)
		cancel()
		if err != nil {
			return 0, err
		}
		c.Close()
		if least == 0 || took < least {
			least = took
		}
	}
	return least, nil
}
