// Package freeport picks loopback TCP addresses for servers that a test or
// the local stack starts a moment later, in another process, and keeps
// the rest of the machine from being handed the same port in between.
//
// Listening on port 0 and closing the listener frees the port at once:
// on Linux, where ephemeral ports are drawn at random, any program that
// asks for a port of its own (a parallel test, the Temporal dev server's
// internal services) or opens an outgoing connection may get it before
// the server binds it. Addr also connects to the port and closes that
// connection from the listening side first, which leaves the listening
// side's socket in TIME_WAIT for about a minute: the kernel hands out
// no port in TIME_WAIT for port 0 or for an outgoing connection, while a
// server that binds the port by number with SO_REUSEADDR, as Go's
// listeners do, still can.
package freeport

import (
	"fmt"
	"net"
)

// Addr returns a free host:port on host, a loopback address such as
// 127.0.0.1, held back from automatic allocation for about a minute.
func Addr(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("pick a free port on %s: %v", host, err)
	}
	return l.Addr().String(), reserve(l)
}

// Hold holds back addr, a port a server had and is about to bind again
// (a process restarted), from automatic allocation for about a minute, as
// Addr does for a new one: between the two, the port is free, and the
// restarted program's own internal services, asking for ports of their
// own, could otherwise be handed it. It fails if the port is in use.
func Hold(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("hold %s: %v", addr, err)
	}
	return reserve(l)
}

// reserve connects to l and closes the accepted side first, which keeps
// the TIME_WAIT socket on l's address; it closes l.
func reserve(l net.Listener) error {
	defer l.Close()
	addr := l.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return fmt.Errorf("reserve %s: %v", addr, err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		return fmt.Errorf("reserve %s: %v", addr, err)
	}
	// The side that closes first keeps the TIME_WAIT socket, on addr.
	if err := s.Close(); err != nil {
		return fmt.Errorf("reserve %s: %v", addr, err)
	}
	return nil
}

// Port is Addr's port number.
func Port(host string) (int, error) {
	addr, err := Addr(host)
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	var n int
	_, err = fmt.Sscan(port, &n)
	return n, err
}
