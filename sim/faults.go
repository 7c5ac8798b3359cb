package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FaultRule injects latency and errors into one RPC (or "*" for all of
// them). Latency is served while the call holds its volume, so concurrent
// calls on the same volume see ABORTED, as on a real driver. An error fires
// for the next Count calls, or with Probability on each call; a latency
// without a code delays every call, or with Count only the next Count.
//
// Discard, instead of an error, answers success without applying the call
// (for the next Count calls, or with Probability): storage that
// acknowledges a fence it never put in place. It applies to
// FenceClusterNetwork and UnfenceClusterNetwork.
//
// Lost carries the call out and answers Code instead of its result: an
// answer lost on the way back, after the storage acted. It applies to the
// CSI calls that make something (CreateSnapshot, CreateVolume,
// CreateVolumeGroupSnapshot), whose caller must then find what it made.
//
// Detached serves the latency of a replication call whole when its caller
// gives up, the call holding its volume and then taking effect: a driver
// that runs its operations to their end whatever the request's context
// says (ceph-csi's librbd calls are not cancelled; the ceph-csi profile
// serves every replication call so).
type FaultRule struct {
	Method      string        `yaml:"method" json:"method"`
	Code        string        `yaml:"code,omitempty" json:"code,omitempty"`
	Count       int           `yaml:"count,omitempty" json:"count,omitempty"`
	Probability float64       `yaml:"probability,omitempty" json:"probability,omitempty"`
	Latency     time.Duration `yaml:"latency,omitempty" json:"latency,omitempty"`
	Message     string        `yaml:"message,omitempty" json:"message,omitempty"`
	Discard     bool          `yaml:"discard,omitempty" json:"discard,omitempty"`
	Lost        bool          `yaml:"lost,omitempty" json:"lost,omitempty"`
	Detached    bool          `yaml:"detached,omitempty" json:"detached,omitempty"`
	// Subject limits the rule to the calls of a replication RPC on one
	// unit: a volume group's ID, or a volume's that belongs to none.
	Subject string `yaml:"subject,omitempty" json:"subject,omitempty"`
}

// discardable lists the RPCs a Discard rule applies to: those whose effect
// a caller can verify independently.
var discardable = []string{"FenceClusterNetwork", "UnfenceClusterNetwork"}

// losable lists the RPCs a Lost rule applies to.
var losable = []string{"CreateSnapshot", "CreateVolume", "CreateVolumeGroupSnapshot"}

// ParseFaultRule reads the command-line form
// "METHOD[:CODE][,count=N][,p=0.5][,latency=50ms][,msg=text][,subject=ID][,discard][,lost][,detached]".
func ParseFaultRule(s string) (FaultRule, error) {
	parts := strings.Split(s, ",")
	var r FaultRule
	head := strings.SplitN(parts[0], ":", 2)
	r.Method = head[0]
	if len(head) == 2 {
		r.Code = head[1]
	}
	for _, p := range parts[1:] {
		if p == "discard" {
			r.Discard = true
			continue
		}
		if p == "lost" {
			r.Lost = true
			continue
		}
		if p == "detached" {
			r.Detached = true
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return r, fmt.Errorf("fault %q: %q is not key=value", s, p)
		}
		var err error
		switch k {
		case "count":
			r.Count, err = strconv.Atoi(v)
		case "p", "probability":
			r.Probability, err = strconv.ParseFloat(v, 64)
		case "latency":
			r.Latency, err = time.ParseDuration(v)
		case "msg", "message":
			r.Message = v
		case "subject":
			r.Subject = v
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return r, fmt.Errorf("fault %q: %v", s, err)
		}
	}
	return r, r.validate()
}

func (r FaultRule) validate() error {
	if r.Method != "*" && !knownMethod(r.Method) {
		return fmt.Errorf("unknown RPC %q", r.Method)
	}
	if r.Discard {
		if !slices.Contains(discardable, r.Method) {
			return fmt.Errorf("discard applies to %s only, not %q", strings.Join(discardable, " and "), r.Method)
		}
		if r.Code != "" {
			return fmt.Errorf("discard answers success; it cannot also return %s", r.Code)
		}
		if r.Count <= 0 && r.Probability <= 0 {
			return fmt.Errorf("discard needs count>0 or probability>0")
		}
	}
	if r.Lost {
		if !slices.Contains(losable, r.Method) {
			return fmt.Errorf("lost applies to %s only, not %q", strings.Join(losable, ", "), r.Method)
		}
		if r.Code == "" {
			return fmt.Errorf("lost needs the code to answer instead of the result")
		}
	}
	if r.Code != "" {
		if _, err := parseCode(r.Code); err != nil {
			return err
		}
		if r.Count <= 0 && r.Probability <= 0 {
			return fmt.Errorf("code %s needs count>0 or probability>0", r.Code)
		}
	}
	if r.Count < 0 {
		return fmt.Errorf("count %d is negative", r.Count)
	}
	if r.Probability < 0 || r.Probability > 1 {
		return fmt.Errorf("probability %v is not within [0,1]", r.Probability)
	}
	if r.Code == "" && r.Latency <= 0 && !r.Discard {
		return fmt.Errorf("a fault needs a code, a latency or discard")
	}
	return nil
}

func parseCode(name string) (codes.Code, error) {
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(strings.ToUpper(name)))); err != nil {
		return 0, fmt.Errorf("unknown gRPC code %q", name)
	}
	if c == codes.OK {
		return 0, fmt.Errorf("code OK is not a fault")
	}
	return c, nil
}

// faults holds the active rules and counts what fired.
type faults struct {
	mu    sync.Mutex
	rules []FaultRule
	rng   *rand.Rand
	fired map[string]int
}

func newFaults(seed uint64, rules []FaultRule) *faults {
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return &faults{rules: append([]FaultRule(nil), rules...), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), fired: map[string]int{}}
}

func (f *faults) set(rules []FaultRule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append([]FaultRule(nil), rules...)
}

func (f *faults) list() []FaultRule {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FaultRule(nil), f.rules...)
}

func (f *faults) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.fired {
		out[k] = v
	}
	return out
}

// inject applies the rules for method: it waits out their latency (or the
// caller's deadline) and returns the injected error, if one fires.
func (f *faults) inject(ctx context.Context, method string) error {
	return f.injectOn(ctx, method, "", false)
}

// injectOn is inject for a call on one unit (subject): rules with a
// Subject apply only to calls on that unit. A detached call (or one a
// Detached rule matches) serves its latency whole when its caller gives
// up.
func (f *faults) injectOn(ctx context.Context, method, subject string, detached bool) error {
	f.mu.Lock()
	var latency time.Duration
	var fire *FaultRule
	for i := range f.rules {
		r := &f.rules[i]
		if r.Method != method && r.Method != "*" || r.Subject != "" && r.Subject != subject {
			continue
		}
		latency += r.Latency
		detached = detached || r.Detached
		if r.Code == "" && !r.Discard && r.Count > 0 {
			// A latency alone, for the next Count calls.
			if r.Count--; r.Count == 0 {
				r.Count = -1 // spent
			}
		}
		if r.Code == "" || r.Discard || r.Lost || fire != nil {
			continue
		}
		switch {
		case r.Count > 0:
			r.Count--
			fire = r
		case r.Probability > 0 && f.rng.Float64() < r.Probability:
			fire = r
		}
	}
	var err error
	if fire != nil {
		code, _ := parseCode(fire.Code)
		msg := fire.Message
		if msg == "" {
			msg = fmt.Sprintf("injected %s", code)
		}
		err = status.Error(code, msg)
		f.fired[method+":"+code.String()]++
	}
	// Spent count rules are dropped.
	kept := f.rules[:0]
	for _, r := range f.rules {
		if r.Code != "" && r.Count == 0 && r.Probability == 0 || r.Count < 0 {
			continue
		}
		kept = append(kept, r)
	}
	f.rules = kept
	f.mu.Unlock()

	if latency > 0 {
		t := time.NewTimer(latency)
		defer t.Stop()
		done := ctx.Done()
		if detached {
			done = nil
		}
		select {
		case <-t.C:
		case <-done:
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return err
}

// discard tells whether a Discard rule for method fires on this call: the
// caller then answers success without applying the call. A spent rule is
// dropped.
func (f *faults) discard(method string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fired := false
	kept := f.rules[:0]
	for _, r := range f.rules {
		if r.Discard && r.Method == method && !fired {
			switch {
			case r.Count > 0:
				r.Count--
				fired = true
				if r.Count == 0 && r.Probability == 0 {
					continue
				}
			case r.Probability > 0 && f.rng.Float64() < r.Probability:
				fired = true
			}
		}
		kept = append(kept, r)
	}
	f.rules = kept
	if fired {
		f.fired[method+":DISCARDED"]++
	}
	return fired
}

// lose returns the error a Lost rule for method answers with in place of
// the result of a call that was carried out, or nil. A spent rule is
// dropped.
func (f *faults) lose(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var fire *FaultRule
	kept := f.rules[:0]
	for _, r := range f.rules {
		if r.Lost && r.Method == method && fire == nil {
			switch {
			case r.Count > 0:
				r.Count--
				fire = &r
				if r.Count == 0 && r.Probability == 0 {
					continue
				}
			case r.Probability > 0 && f.rng.Float64() < r.Probability:
				fire = &r
			}
		}
		kept = append(kept, r)
	}
	f.rules = kept
	if fire == nil {
		return nil
	}
	code, _ := parseCode(fire.Code)
	msg := fire.Message
	if msg == "" {
		msg = fmt.Sprintf("injected %s after the call was carried out", code)
	}
	f.fired[method+":"+code.String()+":LOST"]++
	return status.Error(code, msg)
}
