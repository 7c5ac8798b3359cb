package workflows

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/drover-dr/drover/internal/codec"
	"github.com/drover-dr/drover/plans"
)

// MaxInputBytes is the largest workflow input, as it travels after the
// codec, that the Temporal server accepts: its default blob size limit
// (limit.blobSize.error, 2 MiB). It refuses a larger StartWorkflowExecution
// outright, and gRPC's own 4 MiB message limit lies above it.
const MaxInputBytes = 2 << 20

// InputReserve is the room an action's input keeps besides its plan: the
// site names, the CIDRs a failover fenced, the clients Protect recorded.
const InputReserve = 64 << 10

// InputTooLargeError refuses a plan whose workflow input would not fit.
type InputTooLargeError struct {
	Plan  string
	Size  int // the encoded input with the plan, in bytes
	Limit int // MaxInputBytes - InputReserve
}

func (e *InputTooLargeError) Error() string {
	return fmt.Sprintf("plan %q is too large to start an action: its workflow input is %d bytes after compression, over the limit of %d bytes "+
		"(Temporal accepts %d, %d kept for the action's own fields); split the plan into several plans",
		e.Plan, e.Size, e.Limit, MaxInputBytes, InputReserve)
}

// InputSize is the size, encoded as the worker and drctl send it, of the
// largest action input that carries p (every action's input is the plan
// and a few small fields).
func InputSize(p *plans.Plan) (int, error) {
	in := FailoverInput{Plan: p}
	if len(p.Sites) == 2 {
		in.From, in.To = p.Sites[0].Name, p.Sites[1].Name
	}
	payload, err := codec.Converter().ToPayload(in)
	if err != nil {
		return 0, fmt.Errorf("encode the input of plan %q: %w", p.Metadata.Name, err)
	}
	return proto.Size(payload), nil
}

// CheckInputSize refuses, with an *InputTooLargeError, a plan whose action
// input would exceed what Temporal accepts, so that a plan that validates
// can start.
func CheckInputSize(p *plans.Plan) error {
	n, err := InputSize(p)
	if err != nil {
		return err
	}
	if limit := MaxInputBytes - InputReserve; n > limit {
		return &InputTooLargeError{Plan: p.Metadata.Name, Size: n, Limit: limit}
	}
	return nil
}
