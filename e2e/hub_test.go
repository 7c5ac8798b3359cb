package e2e_test

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// hub is the WAN: a repeater in the WAN's namespace, in this process.
// It holds a packet socket on each site's WAN-side veth, and every
// frame that comes in on one goes out of the others wanDelay later,
// as a line of that length would carry it. It stands where a bridge
// with netem delay would, and needs neither: kernels built without
// sch_netem (and without the fq an eBPF delay needs) are common.
//
// The sockets take frames with their virtio-net header
// (PACKET_VNET_HDR), so a TCP segment the sender's stack left whole
// for the veth's offload crosses as one frame and is cut to the MTU,
// its checksum filled in, on the far side's way out.
type hub struct {
	delay time.Duration
	mu    sync.Mutex
	ports []*hubPort
	done  chan struct{}
	wg    sync.WaitGroup
}

// hubPort is one site's veth end: its socket and the frames waiting to
// go out of it.
type hubPort struct {
	name string
	fd   int
	out  chan hubFrame
}

type hubFrame struct {
	due time.Time
	b   []byte
}

// hubQueue bounds the frames in flight toward one port: a line whose
// queue is full drops, as a router's would.
const hubQueue = 8192

func newHub(delay time.Duration) *hub {
	return &hub{delay: delay, done: make(chan struct{})}
}

// attach opens a packet socket on interface name of namespace ns and
// starts repeating what it receives.
func (h *hub) attach(ns, name string) error {
	var fd int
	err := inNetns(ns, func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_ALL))
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		for _, o := range []struct{ level, opt, v int }{
			{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1},
			{unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1},
			{unix.SOL_SOCKET, unix.SO_RCVBUF, 4 << 20},
		} {
			if err := unix.SetsockoptInt(fd, o.level, o.opt, o.v); err != nil {
				unix.Close(fd)
				return fmt.Errorf("packet socket option %d: %w", o.opt, err)
			}
		}
		// A bounded wait, so the repeater sees the hub close.
		tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			unix.Close(fd)
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind to %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	p := &hubPort{name: name, fd: fd, out: make(chan hubFrame, hubQueue)}
	h.mu.Lock()
	h.ports = append(h.ports, p)
	h.mu.Unlock()
	h.wg.Add(2)
	go h.receive(p)
	go h.send(p)
	return nil
}

// receive repeats each frame p takes in toward every other port.
func (h *hub) receive(p *hubPort) {
	defer h.wg.Done()
	buf := make([]byte, 1<<17)
	for {
		select {
		case <-h.done:
			return
		default:
		}
		n, _, err := unix.Recvfrom(p.fd, buf, 0)
		if err != nil {
			// EAGAIN: the wait ran out; ENETDOWN: the link was cut (the
			// socket takes frames again once it is up); EINTR.
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENETDOWN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		due := time.Now().Add(h.delay)
		h.mu.Lock()
		ports := h.ports
		h.mu.Unlock()
		for _, q := range ports {
			if q == p {
				continue
			}
			f := hubFrame{due: due, b: append([]byte(nil), buf[:n]...)}
			select {
			case q.out <- f:
			default: // the line's queue is full: dropped
			}
		}
	}
}

// send puts out each frame bound for p once its delay has passed; the
// frames come in the order they are due.
func (h *hub) send(p *hubPort) {
	defer h.wg.Done()
	for {
		select {
		case <-h.done:
			return
		case f := <-p.out:
			if d := time.Until(f.due); d > 0 {
				select {
				case <-h.done:
					return
				case <-time.After(d):
				}
			}
			// A cut link refuses (ENETDOWN): the frame is lost, as on
			// a cut line.
			_, _ = unix.Write(p.fd, f.b)
		}
	}
}

// close stops the repeater and closes its sockets.
func (h *hub) close() {
	select {
	case <-h.done:
		return
	default:
	}
	close(h.done)
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.ports {
		unix.Close(p.fd)
	}
	h.ports = nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
