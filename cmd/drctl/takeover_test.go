package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	replicationpb "go.temporal.io/api/replication/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// fakeCluster is the Temporal cluster drctl reaches, as drctl asks it:
// where the namespace is active, its own name, the clusters it knows,
// and an UpdateNamespace that makes it active.
type fakeCluster struct {
	mu                 sync.Mutex
	global             bool
	here, active, addr string
	version            int64
	updates            []string // the active cluster each UpdateNamespace asked for
	listed             int      // ListClusters calls
}

// clusterClient is drctl's client of f: its workflow and operator
// services only.
type clusterClient struct {
	client.Client
	f *fakeCluster
}

func (c clusterClient) WorkflowService() workflowservice.WorkflowServiceClient {
	return clusterWorkflows{f: c.f}
}

func (c clusterClient) OperatorService() operatorservice.OperatorServiceClient {
	return clusterOperator{f: c.f}
}

type clusterWorkflows struct {
	workflowservice.WorkflowServiceClient
	f *fakeCluster
}

type clusterOperator struct {
	operatorservice.OperatorServiceClient
	f *fakeCluster
}

func (w clusterWorkflows) DescribeNamespace(context.Context, *workflowservice.DescribeNamespaceRequest, ...grpc.CallOption) (*workflowservice.DescribeNamespaceResponse, error) {
	f := w.f
	f.mu.Lock()
	defer f.mu.Unlock()
	return &workflowservice.DescribeNamespaceResponse{IsGlobalNamespace: f.global, FailoverVersion: f.version,
		ReplicationConfig: &replicationpb.NamespaceReplicationConfig{ActiveClusterName: f.active}}, nil
}

func (w clusterWorkflows) GetClusterInfo(context.Context, *workflowservice.GetClusterInfoRequest, ...grpc.CallOption) (*workflowservice.GetClusterInfoResponse, error) {
	return &workflowservice.GetClusterInfoResponse{ClusterName: w.f.here}, nil
}

func (w clusterWorkflows) UpdateNamespace(_ context.Context, r *workflowservice.UpdateNamespaceRequest, _ ...grpc.CallOption) (*workflowservice.UpdateNamespaceResponse, error) {
	f := w.f
	f.mu.Lock()
	defer f.mu.Unlock()
	to := r.GetReplicationConfig().GetActiveClusterName()
	f.updates = append(f.updates, to)
	f.active, f.version = to, f.version+10
	return &workflowservice.UpdateNamespaceResponse{}, nil
}

func (o clusterOperator) ListClusters(context.Context, *operatorservice.ListClustersRequest, ...grpc.CallOption) (*operatorservice.ListClustersResponse, error) {
	f := o.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed++
	cs := []*operatorservice.ClusterMetadata{{ClusterName: f.here, Address: "127.0.0.1:1"}}
	if f.addr != "" {
		cs = append(cs, &operatorservice.ClusterMetadata{ClusterName: "east", Address: f.addr})
	}
	return &operatorservice.ListClustersResponse{Clusters: cs}, nil
}

// answeringFrontend is a Temporal frontend on 127.0.0.1 that passes the
// SDK's health check, and nothing more.
func answeringFrontend(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("temporal.api.workflowservice.v1.WorkflowService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	workflowservice.RegisterWorkflowServiceServer(srv, &workflowservice.UnimplementedWorkflowServiceServer{})
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return l.Addr().String()
}

// silentAddress is an address on 127.0.0.1 where nothing listens.
func silentAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestFailoverStartsWhereTheNamespaceIsActive: drctl failover's check of
// a global namespace (multi-cluster Temporal) against the cluster it
// reaches, west (fakes of west's services; east's frontend a health
// server on 127.0.0.1, or an address where nothing listens):
//   - a local namespace, or a global one active on west (with or without
//     --take-over-namespace): nothing asked of other clusters, nothing
//     said, nothing taken over;
//   - active on east, which answers: the start goes there (forwarded by
//     west), drctl says so, nothing taken over;
//   - active on east, which does not answer (or whose address west does
//     not know): refused (exit 1), naming east and --take-over-namespace,
//     nothing taken over; with --take-over-namespace west is made active
//     for the namespace, once, and drctl waits until west says so.
func TestFailoverStartsWhereTheNamespaceIsActive(t *testing.T) {
	up := answeringFrontend(t)
	down := silentAddress(t)
	for _, c := range []struct {
		name           string
		global         bool
		active, addr   string
		takeOver       bool
		wantExit       int // 0 for none
		wantUpdates    []string
		wantSays       []string
		wantSaysNot    []string
		wantNoListCall bool
	}{
		{name: "local namespace", global: false, active: "active", wantNoListCall: true},
		{name: "global, active here", global: true, active: "west", wantNoListCall: true},
		{name: "global, active here, take-over asked", global: true, active: "west", takeOver: true, wantNoListCall: true,
			wantSays: []string{"already active on west, the cluster drctl reaches: nothing to take over"}},
		{name: "active on east, which answers", global: true, active: "east", addr: up,
			wantSays: []string{"active on cluster east (" + up + "), not on west", "the action starts there"}},
		{name: "active on east, which does not answer", global: true, active: "east", addr: down, wantExit: exitFailed,
			wantSays:    []string{"namespace drover is active on Temporal cluster east (" + down + "), which does not answer from here", "--take-over-namespace"},
			wantSaysNot: []string{"the action starts there"}},
		{name: "active on east, address unknown", global: true, active: "east", addr: "", wantExit: exitFailed,
			wantSays: []string{"(address unknown), which does not answer from here (its address is unknown to this cluster)"}},
		{name: "active on east, which answers, take-over asked", global: true, active: "east", addr: up, takeOver: true,
			wantSays:    []string{"which answers: nothing is taken over", "the action starts there"},
			wantSaysNot: []string{"taking namespace"}},
		{name: "active on east, which does not answer, taken over", global: true, active: "east", addr: down, takeOver: true,
			wantUpdates: []string{"west"},
			wantSays:    []string{"taking namespace drover over: active cluster east -> west", "is active on west (failover version 1 -> 11)"},
			wantSaysNot: []string{"the action starts there"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeCluster{global: c.global, here: "west", active: c.active, addr: c.addr, version: 1}
			var stderr bytes.Buffer
			a := &app{ns: "drover", stderr: &stderr}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := a.activeHere(ctx, clusterClient{f: f}, c.takeOver)
			said := stderr.String()
			if err != nil {
				said += err.Error()
			}
			var ee *exitError
			switch {
			case c.wantExit == 0 && err != nil:
				t.Fatalf("refused: %v", err)
			case c.wantExit != 0 && (!errors.As(err, &ee) || ee.code != c.wantExit):
				t.Fatalf("%v; want exit %d", err, c.wantExit)
			}
			f.mu.Lock()
			updates, listed := f.updates, f.listed
			f.mu.Unlock()
			if strings.Join(updates, ",") != strings.Join(c.wantUpdates, ",") {
				t.Fatalf("UpdateNamespace asked to make %v active; want %v", updates, c.wantUpdates)
			}
			if c.wantNoListCall && (listed > 0 || said != "" && len(c.wantSays) == 0) {
				t.Fatalf("the namespace is active where drctl is, yet it listed the clusters %d time(s) and said %q", listed, said)
			}
			for _, w := range c.wantSays {
				if !strings.Contains(said, w) {
					t.Errorf("drctl said %q; want %q in it", said, w)
				}
			}
			for _, w := range c.wantSaysNot {
				if strings.Contains(said, w) {
					t.Errorf("drctl said %q; want no %q", said, w)
				}
			}
		})
	}
}
