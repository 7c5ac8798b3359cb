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

// TestVersioningFlags: the workflow worker is a version of deployment
// drover by default, its build ID the module version and revision; a
// deployment name or build ID Temporal would refuse is refused at start,
// and a site worker, which runs activities only, stays unversioned.
func TestVersioningFlags(t *testing.T) {
	c, err := parse([]string{"--allow-unsigned-plans"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d := deploymentOptions(c)
	if !d.UseVersioning || d.Version.DeploymentName != "drover" || d.Version.BuildID == "" || c.makeCurrent != "if-unattended" {
		t.Fatalf("default deployment options %+v (make current %s): want a version of drover with a build ID, current if unattended", d, c.makeCurrent)
	}
	for _, args := range [][]string{{"--deployment-name", "dr.over"}, {"--build-id", ""}, {"--build-id", "a/b"}, {"--make-current", "always"}, {"--unattended-after", "0s"}} {
		if _, err := parse(append([]string{"--allow-unsigned-plans"}, args...), io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	for _, args := range [][]string{{"--site", "east"}, {"--allow-unsigned-plans", "--versioning=false"}} {
		c, err := parse(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if deploymentOptions(c).UseVersioning {
			t.Errorf("%v: a versioned worker", args)
		}
	}
}
