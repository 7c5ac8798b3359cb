package freeport

import (
	"net"
	"testing"
)

// TestReservedPortIsBindableButNotHandedOut: a server can listen on the
// address at once, and none of many automatic allocations on the same
// host gets its port while it is held back.
func TestReservedPortIsBindableButNotHandedOut(t *testing.T) {
	reserved := map[string]bool{}
	for range 20 {
		addr, err := Addr("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		reserved[port] = true
	}
	// A port a server had and closed, held again for its restart.
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if err := Hold(addr); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		reserved[port] = true
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range 2000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		if _, port, _ := net.SplitHostPort(l.Addr().String()); reserved[port] {
			t.Fatalf("port %s was handed out while reserved", port)
		}
	}
	for port := range reserved {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			t.Fatalf("a server cannot bind the reserved port %s: %v", port, err)
		}
		l.Close()
	}
}
