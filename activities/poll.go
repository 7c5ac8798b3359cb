package activities

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"golang.org/x/sync/errgroup"

	"github.com/drover-dr/drover/plans"
)

// DefaultPollInterval is the pause between two polls of a long call.
const DefaultPollInterval = time.Second

// ResyncInput drives ResyncUntilReady.
type ResyncInput struct {
	Call ReplicationInput `json:"call"`
	// Interval between ResyncVolume calls; zero means DefaultPollInterval.
	Interval time.Duration `json:"interval,omitempty"`
	// Primary, when set, is the same source on the site whose copy is
	// primary: the resync is done once the copy accepts the resync (an
	// answer without error) and the primary reports a completed sync
	// that began after After, whatever the copy's ready says. Drivers
	// answer ready=true at different moments: ceph-csi only when both
	// copies are demoted and in sync (a planned move), never for a copy
	// that follows a live primary (ResyncVolume in
	// internal/csi-addons/rbd/replication.go), and from mirror statuses
	// that lag: right after a failback's promotion they still say what
	// they said while both copies were demoted, and ceph-csi answered
	// ready at the first call for a copy that then never followed (on
	// real Ceph, rbd-mirror found it split-brain). The primary's word
	// that it shipped to the copy is the proof that holds for every
	// driver; without a primary to ask, ready is all there is, and so it
	// is when After is still ahead of this host's clock (a workflow's
	// clock that ran ahead, as a test's does), where no time the storage
	// reports can be told from it.
	Primary *ReplicationInput `json:"primary,omitempty"`
	After   time.Time         `json:"after,omitzero"`
}

// PollProgress is a polling activity's heartbeat: it survives a worker
// crash, so the next attempt continues the count and keeps the start.
type PollProgress struct {
	Since time.Time `json:"since"`
	Polls int       `json:"polls"`
	// Attempts counts the activity attempts that worked on this poll.
	Attempts int `json:"attempts"`
}

// ResyncOutcome reports a finished resync: ready, or shipped to (the
// primary's sync at LastSync began after the resync did).
type ResyncOutcome struct {
	PollProgress
	Ready    bool      `json:"ready"`
	Shipped  bool      `json:"shipped,omitempty"`
	LastSync time.Time `json:"lastSync,omitzero"`
}

// ResyncUntilReady calls ResyncVolume until the driver answers ready=true.
// A retryable error ends the attempt and Temporal retries it with the
// plan's back-off; the heartbeat carries the progress across attempts and
// across worker crashes.
func (s *Storage) ResyncUntilReady(ctx context.Context, in ResyncInput) (ResyncOutcome, error) {
	hb := startPoll(ctx)
	defer hb.stop()
	for {
		r, err := s.ResyncVolume(ctx, in.Call)
		p := hb.polled()
		if err != nil {
			return ResyncOutcome{PollProgress: p}, err
		}
		if r.Ready && (in.Primary == nil || in.After.After(time.Now())) {
			return ResyncOutcome{PollProgress: p, Ready: true}, nil
		}
		if in.Primary != nil {
			info, err := s.GetVolumeReplicationInfo(ctx, *in.Primary)
			switch typ, _, _ := FailureOf(err); {
			case err == nil && info.LastSyncTime.After(in.After):
				return ResyncOutcome{PollProgress: p, Ready: r.Ready, Shipped: true, LastSync: info.LastSyncTime}, nil
			case err != nil && typ != ErrNotFound:
				return ResyncOutcome{PollProgress: p}, err
			}
		}
		if err := sleep(ctx, in.Interval); err != nil {
			return ResyncOutcome{PollProgress: p}, err
		}
	}
}

// WaitSyncInput drives WaitForSync.
type WaitSyncInput struct {
	Call ReplicationInput `json:"call"`
	// After: wait for a completed sync that started later than this.
	After time.Time `json:"after"`
	// Interval between polls; zero means DefaultPollInterval.
	Interval time.Duration `json:"interval,omitempty"`
}

// WaitSyncOutcome is the first replication info newer than After.
type WaitSyncOutcome struct {
	PollProgress
	Info ReplicationInfo `json:"info"`
}

// WaitForSync polls GetVolumeReplicationInfo on the primary until its last
// sync is newer than in.After. NOT_FOUND (no sync since the promotion yet)
// is part of waiting; other errors end the attempt as the table says.
func (s *Storage) WaitForSync(ctx context.Context, in WaitSyncInput) (WaitSyncOutcome, error) {
	hb := startPoll(ctx)
	defer hb.stop()
	for {
		info, err := s.GetVolumeReplicationInfo(ctx, in.Call)
		p := hb.polled()
		if err != nil {
			if typ, _, _ := FailureOf(err); typ != ErrNotFound {
				return WaitSyncOutcome{PollProgress: p}, err
			}
		} else if info.LastSyncTime.After(in.After) {
			return WaitSyncOutcome{PollProgress: p, Info: info}, nil
		}
		if err := sleep(ctx, in.Interval); err != nil {
			return WaitSyncOutcome{PollProgress: p}, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		d = DefaultPollInterval
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// poller keeps a polling activity's progress and heartbeats it: after
// every poll, and from a ticker while a slow call is in flight, so the
// heartbeat timeout can be shorter than a call's deadline.
type poller struct {
	ctx  context.Context
	mu   sync.Mutex
	p    PollProgress
	done chan struct{}
	wg   sync.WaitGroup
}

func startPoll(ctx context.Context) *poller {
	h := &poller{ctx: ctx, done: make(chan struct{}), p: PollProgress{Since: time.Now()}}
	if !activity.IsActivity(ctx) {
		return h
	}
	if activity.HasHeartbeatDetails(ctx) {
		var prev PollProgress
		if err := activity.GetHeartbeatDetails(ctx, &prev); err == nil && !prev.Since.IsZero() {
			h.p = prev
		}
	}
	h.p.Attempts++
	every := activity.GetInfo(ctx).HeartbeatTimeout / 3
	if every <= 0 {
		every = time.Second
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				h.beat()
			}
		}
	}()
	h.beat()
	return h
}

func (h *poller) beat() {
	h.mu.Lock()
	p := h.p
	h.mu.Unlock()
	if activity.IsActivity(h.ctx) {
		activity.RecordHeartbeat(h.ctx, p)
	}
}

// polled counts one poll, heartbeats, and returns the progress.
func (h *poller) polled() PollProgress {
	h.mu.Lock()
	h.p.Polls++
	p := h.p
	h.mu.Unlock()
	h.beat()
	return p
}

func (h *poller) stop() {
	close(h.done)
	h.wg.Wait()
}

// SurveyInput is a batch of GetVolumeReplicationInfo calls on one site,
// Protect's poll of many sources in one activity.
type SurveyInput struct {
	Calls []ReplicationInput `json:"calls"`
	// Parallelism bounds the calls in flight (default
	// plans.DefaultParallelism).
	Parallelism int `json:"parallelism,omitempty"`
}

// SurveyEntry is one call's answer, or its error.
type SurveyEntry struct {
	Info  ReplicationInfo `json:"info,omitzero"`
	Error string          `json:"error,omitempty"`
	Type  string          `json:"type,omitempty"`
}

// SurveyResult has one entry per call, in the order of the calls.
type SurveyResult struct {
	Entries []SurveyEntry `json:"entries"`
}

// SurveyReplication makes a batch of GetVolumeReplicationInfo calls, at
// most Parallelism at a time, each within its endpoint's deadline and the
// batch within one deadline in all (a dead site answers the whole batch
// with errors in one deadline, not one per call). A call's failure is an
// entry of the result, not retried: the next poll asks again.
func (s *Storage) SurveyReplication(ctx context.Context, in SurveyInput) (SurveyResult, error) {
	res := SurveyResult{Entries: make([]SurveyEntry, len(in.Calls))}
	if len(in.Calls) == 0 {
		return res, nil
	}
	ctx, cancel := context.WithTimeout(ctx, in.Calls[0].Endpoint.deadline())
	defer cancel()
	limit := in.Parallelism
	if limit <= 0 {
		limit = plans.DefaultParallelism
	}
	var g errgroup.Group
	g.SetLimit(limit)
	for i, c := range in.Calls {
		g.Go(func() error {
			info, err := s.GetVolumeReplicationInfo(ctx, c)
			if err != nil {
				typ, _, _ := FailureOf(err)
				res.Entries[i] = SurveyEntry{Error: err.Error(), Type: typ}
				return nil
			}
			res.Entries[i] = SurveyEntry{Info: info}
			return nil
		})
	}
	_ = g.Wait() // a call's failure is an entry, never the group's error
	return res, nil
}
