package activities

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/drover-dr/drover/plans"
)

// Endpoint is everything one storage call needs to reach a site's
// CSI-Addons service. It travels in activity inputs, so it holds only
// names: file paths and secret references, never secret values.
type Endpoint struct {
	// Site names the site, for errors and logs.
	Site string `json:"site"`
	// Address is unix:///path or host:port.
	Address string `json:"address"`
	// TLS, when set, makes the connection TLS (mutual TLS with Cert and Key).
	TLS *plans.TLS `json:"tls,omitempty"`
	// Secret names the secrets sent with fence and replication calls.
	Secret *plans.SecretRef `json:"secret,omitempty"`
	// Parameters are the plugin parameters sent with the call.
	Parameters map[string]string `json:"parameters,omitempty"`
	// Deadline bounds one call; zero means plans.DefaultCallDeadline.
	Deadline time.Duration `json:"deadline,omitempty"`
}

func (e Endpoint) deadline() time.Duration {
	if e.Deadline > 0 {
		return e.Deadline
	}
	return plans.DefaultCallDeadline
}

// target turns a plan address into a gRPC target: unix sockets keep their
// scheme, host:port goes through the passthrough resolver (no DNS lookup
// on every reconnect of a literal address; names still resolve at dial).
func target(addr string) (string, error) {
	switch {
	case addr == "":
		return "", errors.New("no storage endpoint address")
	case strings.HasPrefix(addr, "unix://"):
		if !strings.HasPrefix(addr, "unix:///") {
			return "", fmt.Errorf("endpoint %q: a unix socket address is unix:///absolute/path", addr)
		}
		return addr, nil
	case strings.Contains(addr, "://"):
		return "", fmt.Errorf("endpoint %q: want unix:///path or host:port", addr)
	default:
		return "passthrough:///" + addr, nil
	}
}

// connKey identifies one reusable connection: the same address reached
// with different TLS settings is a different connection.
type connKey struct {
	addr                string
	ca, cert, key, name string
}

func keyOf(e Endpoint) connKey {
	k := connKey{addr: e.Address}
	if e.TLS != nil {
		k.ca, k.cert, k.key, k.name = e.TLS.CA, e.TLS.Cert, e.TLS.Key, e.TLS.ServerName
	}
	return k
}

// Dialer keeps one gRPC connection per endpoint and hands it to every call
// for that endpoint. Connections are lazy: nothing is dialed until the
// first call, and a site that is down costs a failed call, not a hang.
type Dialer struct {
	mu    sync.Mutex
	conns map[connKey]*cached
}

// cached is one connection and the calls using it. A forgotten
// connection leaves the cache at once but is closed only when its last
// call has ended: closing it under a running call would fail that call
// with "the client connection is closing" instead of its own answer.
type cached struct {
	conn      *grpc.ClientConn
	users     int
	forgotten bool
}

// NewDialer returns an empty connection cache.
func NewDialer() *Dialer { return &Dialer{conns: map[connKey]*cached{}} }

// reconnect keeps a cached connection to a site that comes back from being
// down usable within seconds, not the two minutes of gRPC's default.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// Conn returns the connection for e, creating it on first use.
func (d *Dialer) Conn(e Endpoint) (*grpc.ClientConn, error) {
	c, release, err := d.Lease(e)
	if err != nil {
		return nil, err
	}
	release(false)
	return c, nil
}

// Lease returns the connection for e, creating it on first use, and the
// function to call when the call using it ends. release(true) forgets the
// connection, so that the next call dials again and rereads its TLS files
// (after a handshake failure, say): it leaves the cache at once, and
// closes when the last call leasing it has ended.
func (d *Dialer) Lease(e Endpoint) (conn *grpc.ClientConn, release func(forget bool), err error) {
	k := keyOf(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.conns[k]
	if !ok {
		tgt, err := target(e.Address)
		if err != nil {
			return nil, nil, err
		}
		creds := insecure.NewCredentials()
		if e.TLS != nil {
			cfg, err := clientTLS(e.TLS)
			if err != nil {
				return nil, nil, err
			}
			creds = credentials.NewTLS(cfg)
		}
		conn, err := grpc.NewClient(tgt, grpc.WithTransportCredentials(creds), grpc.WithConnectParams(reconnect))
		if err != nil {
			return nil, nil, fmt.Errorf("endpoint %q: %w", e.Address, err)
		}
		c = &cached{conn: conn}
		d.conns[k] = c
	}
	c.users++
	var once sync.Once
	return c.conn, func(forget bool) { once.Do(func() { d.release(k, c, forget) }) }, nil
}

func (d *Dialer) release(k connKey, c *cached, forget bool) {
	d.mu.Lock()
	c.users--
	if forget && d.conns[k] == c {
		delete(d.conns, k)
		c.forgotten = true
	}
	closeNow := c.forgotten && c.users == 0
	d.mu.Unlock()
	if closeNow {
		c.conn.Close()
	}
}

// Close closes every cached connection.
func (d *Dialer) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for k, c := range d.conns {
		errs = append(errs, c.conn.Close())
		delete(d.conns, k)
	}
	return errors.Join(errs...)
}

// errTLSConfig marks a TLS set-up that cannot work until the plan or the
// files are fixed.
var errTLSConfig = errors.New("tls configuration")

func clientTLS(t *plans.TLS) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("%w: read CA file: %v", errTLSConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", errTLSConfig, t.CA)
		}
		cfg.RootCAs = pool
	}
	if (t.Cert == "") != (t.Key == "") {
		return nil, fmt.Errorf("%w: a client certificate needs both cert and key", errTLSConfig)
	}
	if t.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: load client certificate %s: %v", errTLSConfig, t.Cert, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
