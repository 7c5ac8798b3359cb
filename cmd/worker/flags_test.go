package main

import (
	"io"
	"net"
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
