package sim_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/identity"
	"github.com/drover-dr/drover/csiaddons/replication"
	"github.com/drover-dr/drover/internal/simtest"
	"github.com/drover-dr/drover/sim"
)

// Client addresses standing for the nodes of each site.
const (
	nodeA = simtest.NodeA
	nodeB = simtest.NodeB
)

var (
	freeAddr   = simtest.FreeAddr
	quietLog   = simtest.QuietLog
	eventually = simtest.Eventually
)

// siteUnderTest is a running site with gRPC clients of its services.
type siteUnderTest struct {
	*sim.Site
	cfg  sim.Config
	conn *grpc.ClientConn
	id   identity.IdentityClient
	fc   fence.FenceControllerClient
	rc   replication.ControllerClient
}

type pairOpts = simtest.Options

// startPair starts two peered sites, A primary and B secondary, serving
// gRPC on unix sockets and the data path on loopback TCP.
func startPair(t *testing.T, o pairOpts) (a, b *siteUnderTest) {
	t.Helper()
	sa, sb := simtest.StartPair(t, o)
	return attachInsecure(t, sa), attachInsecure(t, sb)
}

func startSite(t *testing.T, cfg sim.Config) *siteUnderTest {
	t.Helper()
	return attachInsecure(t, simtest.StartSite(t, cfg))
}

func attachInsecure(t *testing.T, s *simtest.Site) *siteUnderTest {
	return attach(t, s.Site, s.Config, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func attach(t *testing.T, s *sim.Site, cfg sim.Config, opts ...grpc.DialOption) *siteUnderTest {
	t.Helper()
	target := cfg.GRPCAddr
	if len(target) > 7 && target[:7] == "unix://" {
		target = "unix:" + target[7:]
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &siteUnderTest{Site: s, cfg: cfg, conn: conn,
		id: identity.NewIdentityClient(conn), fc: fence.NewFenceControllerClient(conn), rc: replication.NewControllerClient(conn)}
}

// up brings a downed site back and waits until its Probe answers ready
// on this connection. The client may still hold the transport the site
// closed when it went down, and the first call on it fails UNAVAILABLE,
// as it would for Drover's activities, which retry it.
func up(t *testing.T, s *siteUnderTest) {
	t.Helper()
	mustOK(t, s.Up())
	eventually(t, 5*time.Second, "probe after up", func() bool {
		p, err := s.id.Probe(ctxT(t), &identity.ProbeRequest{})
		return err == nil && p.GetReady().GetValue()
	})
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func group(id string) *replication.ReplicationSource {
	return &replication.ReplicationSource{Type: &replication.ReplicationSource_Volumegroup{Volumegroup: &replication.ReplicationSource_VolumeGroupSource{VolumeGroupId: id}}}
}

func volume(id string) *replication.ReplicationSource {
	return &replication.ReplicationSource{Type: &replication.ReplicationSource_Volume{Volume: &replication.ReplicationSource_VolumeSource{VolumeId: id}}}
}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("got code %v (%v), want %v", got, err, want)
	}
}

func codesOf(err error) codes.Code { return status.Code(err) }

// wantMessage fails unless err has the code and its message is msg.
func wantMessage(t *testing.T, err error, want codes.Code, msg string) {
	t.Helper()
	if st := status.Convert(err); st.Code() != want || st.Message() != msg {
		t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), want, msg)
	}
}

// tlsClientConfig trusts caFile and presents the client certificate.
func tlsClientConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}, nil
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func enable(t *testing.T, s *siteUnderTest, src *replication.ReplicationSource) {
	t.Helper()
	_, err := s.rc.EnableVolumeReplication(ctxT(t), &replication.EnableVolumeReplicationRequest{ReplicationSource: src, Secrets: s.cfg.Secrets})
	mustOK(t, err)
}

func info(t *testing.T, s *siteUnderTest, src *replication.ReplicationSource) (*replication.GetVolumeReplicationInfoResponse, error) {
	t.Helper()
	return s.rc.GetVolumeReplicationInfo(ctxT(t), &replication.GetVolumeReplicationInfoRequest{ReplicationSource: src, Secrets: s.cfg.Secrets})
}

func dataClient(t *testing.T, s *siteUnderTest, from string) *sim.Client {
	t.Helper()
	c, err := sim.NewClient(s.cfg.DataAddr, from, "node-"+from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// waitSynced waits until the primary's copy of key has shipped everything
// it holds to the peer.
func waitSynced(t *testing.T, primary *siteUnderTest, key string) {
	t.Helper()
	eventually(t, 5*time.Second, "sync of "+key, func() bool {
		u := primary.Snapshot().Unit(key)
		return u != nil && u.LastSync != nil && u.PeerSeq == u.Seq
	})
}

func check(t *testing.T, sites ...*siteUnderTest) *sim.Report {
	t.Helper()
	var states []*sim.State
	for _, s := range sites {
		states = append(states, s.Snapshot())
	}
	r := sim.Check(states...)
	if !r.OK() {
		t.Fatalf("%s", r)
	}
	return r
}
