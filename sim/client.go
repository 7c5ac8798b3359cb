package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Data-path errors a client can tell apart.
var (
	ErrFenced      = errors.New("client is fenced")
	ErrReadOnly    = errors.New("copy is not primary (read-only)")
	ErrNotFound    = errors.New("not found")
	ErrUnavailable = errors.New("site unavailable")
)

// Client writes and reads blocks on a site's data path from a chosen source
// address: a client on 127.0.0.2 stands for a node of one site, one on
// 127.0.0.3 for a node of another, and fences apply to them by address.
type Client struct {
	base string
	id   string
	http *http.Client
}

// NewClient returns a data-path client of the site at dataAddr whose
// connections come from localIP ("" lets the system choose). id names the
// client in GetFenceClients.
func NewClient(dataAddr, localIP, id string) (*Client, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	if localIP != "" {
		ip := net.ParseIP(localIP)
		if ip == nil {
			return nil, fmt.Errorf("client address %q is not an IP address", localIP)
		}
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 2}
	return &Client{base: "http://" + dataAddr, id: id, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}, nil
}

// DialFunc makes a connection, as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// NewClientVia is NewClient whose connections dial makes: a client in
// another network namespace, say, whose dial also picks the source
// address.
func NewClientVia(dataAddr, id string, dial DialFunc) *Client {
	tr := &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 2}
	return &Client{base: "http://" + dataAddr, id: id, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

func (c *Client) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if c.id != "" {
		req.Header.Set(ClientHeader, c.id)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return resp, nil
}

func errorFrom(resp *http.Response) error {
	var e struct {
		Error string `json:"error"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = json.Unmarshal(raw, &e)
	msg := e.Error
	if msg == "" {
		msg = string(raw)
	}
	switch resp.StatusCode {
	case http.StatusForbidden:
		return fmt.Errorf("%w: %s", ErrFenced, msg)
	case http.StatusConflict:
		return fmt.Errorf("%w: %s", ErrReadOnly, msg)
	case http.StatusNotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, msg)
	case http.StatusServiceUnavailable:
		return fmt.Errorf("%w: %s", ErrUnavailable, msg)
	}
	return fmt.Errorf("data path: %s: %s", resp.Status, msg)
}

// WriteResult is the acknowledgement of a write.
type WriteResult struct {
	Seq   uint64 `json:"seq"`
	Epoch uint64 `json:"epoch"`
}

// Write writes one block; a nil error means the site acknowledged it durably.
func (c *Client) Write(ctx context.Context, volume string, block int64, data []byte) (WriteResult, error) {
	resp, err := c.do(ctx, http.MethodPut, "/v1/volumes/"+volume+"/blocks/"+strconv.FormatInt(block, 10), data)
	if err != nil {
		return WriteResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return WriteResult{}, errorFrom(resp)
	}
	var wr WriteResult
	err = json.NewDecoder(resp.Body).Decode(&wr)
	return wr, err
}

// Read reads one block.
func (c *Client) Read(ctx context.Context, volume string, block int64) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/volumes/"+volume+"/blocks/"+strconv.FormatInt(block, 10), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errorFrom(resp)
	}
	return io.ReadAll(resp.Body)
}

// Control drives a site's control API.
type Control struct {
	base string
	http *http.Client
}

// NewControl returns a client of the control API at addr.
func NewControl(addr string) *Control {
	return &Control{base: "http://" + addr, http: &http.Client{Timeout: 10 * time.Second}}
}

// NewControlVia is NewControl whose connections dial makes.
func NewControlVia(addr string, dial DialFunc) *Control {
	return &Control{base: "http://" + addr, http: &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 10 * time.Second}}
}

func (c *Control) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("control %s %s: %w", method, path, errorFrom(resp))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// State fetches the site's state.
func (c *Control) State(ctx context.Context) (*State, error) {
	var st State
	return &st, c.call(ctx, http.MethodGet, "/v1/state", nil, &st)
}

// SetFaults replaces the site's injected faults.
func (c *Control) SetFaults(ctx context.Context, rules []FaultRule) error {
	return c.call(ctx, http.MethodPut, "/v1/faults", rules, nil)
}

// FaultsFired counts the injected errors that fired so far, by
// "RPC:CODE".
func (c *Control) FaultsFired(ctx context.Context) (map[string]int, error) {
	var out struct {
		Fired map[string]int `json:"fired"`
	}
	return out.Fired, c.call(ctx, http.MethodGet, "/v1/faults", nil, &out)
}

// Down takes the site down; Up brings it back.
func (c *Control) Down(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/down", nil, nil)
}

// PowerLoss takes the site down as a power cut does; Up restarts it.
func (c *Control) PowerLoss(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/power-loss", nil, nil)
}

// Up brings a downed site back.
func (c *Control) Up(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/up", nil, nil)
}

// SetLink cuts or restores the replication link.
func (c *Control) SetLink(ctx context.Context, up bool) error {
	p := "/v1/link/down"
	if up {
		p = "/v1/link/up"
	}
	return c.call(ctx, http.MethodPost, p, nil, nil)
}
