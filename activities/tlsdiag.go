package activities

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/status"
)

// diagnoseTimeout bounds the handshake diagnoseTLS makes.
const diagnoseTimeout = 2 * time.Second

// mayBeTLSMistake tells the UNAVAILABLE answers that a TLS mistake can
// hide behind: the connection was accepted, then dropped. Under TLS 1.3 a
// server that refuses the client's certificate does so after the client's
// side of the handshake, so the client sees a broken pipe; a TLS server
// reached in plaintext closes before its HTTP/2 preface. A refused
// connection or a missing socket is a site that is down: never a TLS
// mistake.
func mayBeTLSMistake(err error) bool {
	msg := status.Convert(err).Message()
	if strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such file") {
		return false
	}
	for _, s := range []string{"server preface", "broken pipe", "connection reset", "EOF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// diagnoseTLS makes one TLS handshake with the endpoint, as the plan sets
// it up, to name a mistake the gRPC connection could not: a plaintext plan
// against an endpoint that serves TLS, or a client certificate the
// endpoint refuses. It returns "" when it finds none (or cannot tell: a
// site that is down gets retried as before).
func diagnoseTLS(ctx context.Context, e Endpoint) string {
	network, addr := "tcp", e.Address
	if p, ok := strings.CutPrefix(addr, "unix://"); ok {
		network, addr = "unix", p
	}
	timeout := diagnoseTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return ""
	}
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}}
	if e.TLS == nil {
		// Only asks whether the endpoint speaks TLS at all; nothing is
		// sent over this connection, so its certificate is not checked.
		dialer.Config = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // a probe, no data
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return ""
		}
		conn.Close()
		return "the endpoint serves TLS, but the plan sets no storage.tls"
	}
	cfg, err := clientTLS(e.TLS)
	if err != nil {
		return ""
	}
	dialer.Config = cfg
	conn, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return strings.TrimPrefix(err.Error(), "tls: ")
	}
	defer conn.Close()
	// The server's verdict on the client certificate arrives after the
	// handshake: read until it, the server's own first frame, or a pause.
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	var one [1]byte
	_, err = conn.Read(one[:])
	var ne net.Error
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return ""
	}
	if strings.Contains(err.Error(), "tls:") {
		return strings.TrimPrefix(err.Error(), "tls: ")
	}
	return ""
}

// tlsFix names the field of storage.tls that a TLS failure's message
// points at, and what to do about it.
func tlsFix(msg string) string {
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("first record does not look like a TLS handshake"):
		return "storage.tls: the endpoint serves plaintext; remove storage.tls from the plan, or serve TLS on the endpoint"
	case has("the endpoint serves TLS"):
		return "storage.tls: set it (ca, and cert and key if the endpoint asks for a client certificate)"
	case has("certificate required"):
		return "storage.tls.cert and storage.tls.key: the endpoint requires a client certificate signed by a CA it trusts"
	case has("remote error") && has("unknown certificate authority", "bad certificate", "certificate unknown", "expired", "revoked"):
		return "storage.tls.cert and storage.tls.key: the endpoint refuses the client certificate (signed by a CA it does not trust, or expired)"
	case has("certificate is valid for", "not valid for any names", "IP SANs"):
		return "storage.tls.serverName: it must be a name in the endpoint's certificate"
	case has("unknown authority", "failed to verify certificate"):
		return "storage.tls.ca: it must hold the CA that signed the endpoint's certificate"
	}
	return "storage.tls: ca, cert, key and serverName"
}

// tlsAdvice is the part of a TLS failure's message that says where and
// what to fix.
func tlsAdvice(msg string, e Endpoint) string {
	return fmt.Sprintf(" (site %s, endpoint %s: fix %s)", e.Site, e.Address, tlsFix(msg))
}
