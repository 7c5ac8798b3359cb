package stack

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/drover-dr/drover/sim"
)

// Writer is an application on one site: it writes a block to each of the
// site's volumes in turn, from the site's client address, and counts what
// the storage did with the writes. A secondary refuses them (read-only), a
// fence rejects them, a lost site does not answer.
type Writer struct {
	Site    string
	Volumes []string
	client  *sim.Client

	mu     sync.Mutex
	counts WriteCounts
}

// WriteCounts are a writer's tallies.
type WriteCounts struct {
	Acked       int `json:"acked"`
	Fenced      int `json:"fenced"`
	ReadOnly    int `json:"readOnly"`
	Unavailable int `json:"unavailable"`
	Other       int `json:"other"`
}

func (c WriteCounts) String() string {
	return fmt.Sprintf("%d acknowledged, %d refused by the fence, %d refused by a secondary, %d while the site was down",
		c.Acked, c.Fenced, c.ReadOnly, c.Unavailable+c.Other)
}

// NewWriter returns a writer to the site's data address from its client
// address.
func NewWriter(site SiteLayout, volumes []string) (*Writer, error) {
	c, err := sim.NewClient(site.Data, site.Client, site.Name+"-app")
	if err != nil {
		return nil, err
	}
	return &Writer{Site: site.Name, Volumes: volumes, client: c}, nil
}

// NewWriterVia is NewWriter on a client of the caller's (one that dials
// from another network namespace, say).
func NewWriterVia(site string, volumes []string, c *sim.Client) *Writer {
	return &Writer{Site: site, Volumes: volumes, client: c}
}

// Run writes every interval until ctx ends.
func (w *Writer) Run(ctx context.Context, interval time.Duration) {
	defer w.client.Close()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		vol := w.Volumes[n%len(w.Volumes)]
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := w.client.Write(wctx, vol, int64(n/len(w.Volumes)%64), fmt.Appendf(nil, "%s write %d at %s", w.Site, n, time.Now().Format(time.RFC3339Nano)))
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		switch {
		case err == nil:
			w.counts.Acked++
		case errors.Is(err, sim.ErrFenced):
			w.counts.Fenced++
		case errors.Is(err, sim.ErrReadOnly):
			w.counts.ReadOnly++
		case errors.Is(err, sim.ErrUnavailable):
			w.counts.Unavailable++
		default:
			w.counts.Other++
		}
		w.mu.Unlock()
	}
}

// Counts returns the tallies so far.
func (w *Writer) Counts() WriteCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts
}
