package sim

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/drover-dr/drover/csiaddons/fence"
	"github.com/drover-dr/drover/csiaddons/replication"
)

// A Break makes a site break one rule of the specs on purpose, always, so
// that a conformance check can be shown to catch exactly that rule. Unlike
// a FaultRule, which stands for a passing failure of healthy storage, a
// break stands for a driver bug. The command-line forms:
//
//	nonidempotent:RPC      a repeat of a call that succeeded answers
//	                       FAILED_PRECONDITION (the change is applied anyway)
//	wrongcode:RPC:CODE     every final refusal of RPC carries CODE instead
//	                       (ABORTED, UNAVAILABLE and DEADLINE_EXCEEDED,
//	                       which tell the caller to retry, stay as they are;
//	                       so does the ceph-csi profile's ResyncVolume
//	                       INTERNAL "no snapshot details", its way of
//	                       saying the copy is not there yet)
//	ignoreforce:RPC        PromoteVolume, DemoteVolume or ResyncVolume acts
//	                       as if force were false
//	keepfence              UnfenceClusterNetwork answers success and leaves
//	                       the fence in place
//	noop:RPC               PromoteVolume, DemoteVolume or
//	                       DisableVolumeReplication answers success and
//	                       changes nothing
type Break struct {
	Kind   string
	Method string
	Code   codes.Code
}

// Break kinds.
const (
	BreakNonIdempotent = "nonidempotent"
	BreakWrongCode     = "wrongcode"
	BreakIgnoreForce   = "ignoreforce"
	BreakKeepFence     = "keepfence"
	BreakNoop          = "noop"
)

var noopRPCs = map[string]proto.Message{
	"PromoteVolume":            &replication.PromoteVolumeResponse{},
	"DemoteVolume":             &replication.DemoteVolumeResponse{},
	"DisableVolumeReplication": &replication.DisableVolumeReplicationResponse{},
}

// transient codes are not rewritten by wrongcode: they are no row of a
// spec's error table but the driver asking to be called again.
var transient = []codes.Code{codes.OK, codes.Aborted, codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted}

// callAgain tells whether an answer, though no transient code, asks the
// caller to call again rather than refuses: the ceph-csi profile's
// ResyncVolume answers INTERNAL "no snapshot details" while the copy waits
// for its snapshot (errNoSnapshotDetails), which callers of ceph-csi retry.
// A wrong code for it would break another rule than the refusal's.
func callAgain(method string, st *status.Status) bool {
	return method == "ResyncVolume" && st.Code() == codes.Internal && st.Message() == status.Convert(errNoSnapshotDetails()).Message()
}

var forceRPCs = []string{"PromoteVolume", "DemoteVolume", "ResyncVolume"}

// ParseBreak reads a break's command-line form.
func ParseBreak(s string) (Break, error) {
	parts := strings.Split(s, ":")
	b := Break{Kind: parts[0]}
	bad := func(format string, a ...any) (Break, error) {
		return b, fmt.Errorf("break %q: %s", s, fmt.Sprintf(format, a...))
	}
	switch b.Kind {
	case BreakKeepFence:
		if len(parts) != 1 {
			return bad("keepfence takes no arguments")
		}
		b.Method = "UnfenceClusterNetwork"
		return b, nil
	case BreakNonIdempotent, BreakIgnoreForce, BreakNoop:
		if len(parts) != 2 {
			return bad("want %s:RPC", b.Kind)
		}
	case BreakWrongCode:
		if len(parts) != 3 {
			return bad("want wrongcode:RPC:CODE")
		}
		c, err := parseCode(parts[2])
		if err != nil {
			return bad("%v", err)
		}
		b.Code = c
	default:
		return bad("unknown kind %q (want nonidempotent, wrongcode, ignoreforce, keepfence or noop)", b.Kind)
	}
	b.Method = parts[1]
	if !knownMethod(b.Method) {
		return bad("unknown RPC %q", b.Method)
	}
	if _, ok := noopRPCs[b.Method]; b.Kind == BreakNoop && !ok {
		return bad("noop applies to PromoteVolume, DemoteVolume and DisableVolumeReplication, not %s", b.Method)
	}
	if b.Kind == BreakIgnoreForce && !slices.Contains(forceRPCs, b.Method) {
		return bad("%s has no force flag (want one of %s)", b.Method, strings.Join(forceRPCs, ", "))
	}
	return b, nil
}

// breaks applies a site's breaks around its gRPC handlers.
type breaks struct {
	list []Break
	mu   sync.Mutex
	done map[string]bool // method + request bytes of calls that succeeded
}

func newBreaks(specs []string) (*breaks, error) {
	b := &breaks{done: map[string]bool{}}
	for _, s := range specs {
		br, err := ParseBreak(s)
		if err != nil {
			return nil, err
		}
		b.list = append(b.list, br)
	}
	return b, nil
}

func (b *breaks) find(kind, method string) *Break {
	for i := range b.list {
		if b.list[i].Kind == kind && b.list[i].Method == method {
			return &b.list[i]
		}
	}
	return nil
}

// intercept is the gRPC interceptor that applies the breaks.
func (b *breaks) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if b == nil || len(b.list) == 0 {
		return handler(ctx, req)
	}
	method := path.Base(info.FullMethod)
	if b.find(BreakKeepFence, method) != nil {
		return &fence.UnfenceClusterNetworkResponse{}, nil
	}
	if b.find(BreakNoop, method) != nil {
		return proto.Clone(noopRPCs[method]), nil
	}
	if b.find(BreakIgnoreForce, method) != nil {
		req = withoutForce(req)
	}
	var key string
	nonIdem := b.find(BreakNonIdempotent, method) != nil
	if nonIdem {
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(req.(proto.Message))
		if err == nil {
			key = method + "\x00" + string(raw)
		}
	}
	resp, err := handler(ctx, req)
	if wc := b.find(BreakWrongCode, method); wc != nil && err != nil {
		if st, ok := status.FromError(err); ok && !slices.Contains(transient, st.Code()) && !callAgain(method, st) {
			return nil, status.Error(wc.Code, st.Message())
		}
	}
	if nonIdem && err == nil && key != "" {
		b.mu.Lock()
		seen := b.done[key]
		b.done[key] = true
		b.mu.Unlock()
		if seen {
			return nil, status.Errorf(codes.FailedPrecondition, "%s: already done", method)
		}
	}
	return resp, err
}

func withoutForce(req any) any {
	switch r := req.(type) {
	case *replication.PromoteVolumeRequest:
		c := proto.Clone(r).(*replication.PromoteVolumeRequest)
		c.Force = false
		return c
	case *replication.DemoteVolumeRequest:
		c := proto.Clone(r).(*replication.DemoteVolumeRequest)
		c.Force = false
		return c
	case *replication.ResyncVolumeRequest:
		c := proto.Clone(r).(*replication.ResyncVolumeRequest)
		c.Force = false
		return c
	}
	return req
}
