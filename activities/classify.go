package activities

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The storage RPCs, named as in their full gRPC method names.
const (
	RPCGetIdentity     = "GetIdentity"
	RPCGetCapabilities = "GetCapabilities"
	RPCProbe           = "Probe"

	RPCFenceClusterNetwork   = "FenceClusterNetwork"
	RPCUnfenceClusterNetwork = "UnfenceClusterNetwork"
	RPCListClusterFence      = "ListClusterFence"
	RPCGetFenceClients       = "GetFenceClients"

	RPCEnableVolumeReplication  = "EnableVolumeReplication"
	RPCDisableVolumeReplication = "DisableVolumeReplication"
	RPCPromoteVolume            = "PromoteVolume"
	RPCDemoteVolume             = "DemoteVolume"
	RPCResyncVolume             = "ResyncVolume"
	RPCGetVolumeReplicationInfo = "GetVolumeReplicationInfo"
)

// IdentityRPCs, FenceRPCs and ReplicationRPCs list the RPCs of each service.
var (
	IdentityRPCs    = []string{RPCGetIdentity, RPCGetCapabilities, RPCProbe}
	FenceRPCs       = []string{RPCFenceClusterNetwork, RPCUnfenceClusterNetwork, RPCListClusterFence, RPCGetFenceClients}
	ReplicationRPCs = []string{RPCEnableVolumeReplication, RPCDisableVolumeReplication, RPCPromoteVolume, RPCDemoteVolume, RPCResyncVolume, RPCGetVolumeReplicationInfo}
)

// Outcome is what the caller does with a gRPC code.
type Outcome int

const (
	// Fail: never retry; the step fails for good and the workflow's
	// on-failure policy takes over.
	Fail Outcome = iota
	// Retry with the plan's exponential back-off.
	Retry
	// HandBack returns the error to the workflow at once, which decides
	// (wait and retry, force, roll back); Temporal does not retry it.
	HandBack
	// Done counts the call as successful.
	Done
)

func (o Outcome) String() string {
	return [...]string{"fail", "retry", "hand back", "done"}[o]
}

// general is the outcome of each code for every RPC, from the error tables
// of the fence and replication specs and the CSI spec's rule that any call
// may time out and be retried (calls are idempotent).
var general = map[codes.Code]Outcome{
	codes.InvalidArgument:    Fail,     // "Caller MUST fix the request"
	codes.Unimplemented:      Fail,     // "Caller MUST NOT retry"
	codes.Unauthenticated:    Fail,     // "Caller SHALL fix the secrets"
	codes.Unknown:            Fail,     // "Caller MUST study the logs before retrying"
	codes.FailedPrecondition: HandBack, // "Caller SHOULD ensure that replication is enabled…"
	codes.Aborted:            Retry,    // "retry with exponential back off"
	codes.Unavailable:        Retry,    // the endpoint is not reachable (yet)
	codes.DeadlineExceeded:   Retry,    // "any RPC MAY time out and MAY be retried"
	codes.ResourceExhausted:  Retry,    // the plugin sheds load
}

// perRPC holds the rows where an RPC's own error table differs from the
// general rule. Every replication RPC lists NOT_FOUND ("volume does not
// exist … retry with exponential back off"); the fence and identity
// services do not, so there NOT_FOUND fails. DisableVolumeReplication
// answering NOT_FOUND means nothing is left to disable.
var perRPC = map[string]map[codes.Code]Outcome{
	RPCEnableVolumeReplication:  {codes.NotFound: Retry},
	RPCDisableVolumeReplication: {codes.NotFound: Done},
	RPCPromoteVolume:            {codes.NotFound: Retry},
	RPCDemoteVolume:             {codes.NotFound: Retry},
	RPCResyncVolume:             {codes.NotFound: Retry},
	RPCGetVolumeReplicationInfo: {codes.NotFound: Retry},

	// The CSI controller calls, from csi-spec.txt's error tables.
	// CreateVolume: NOT_FOUND "Source does not exist … verify … before
	// retrying with exponential back off"; ALREADY_EXISTS (incompatible)
	// and OUT_OF_RANGE "MUST fix the arguments": fail, as by default.
	RPCCreateVolume: {codes.NotFound: Retry},
	// DeleteVolume: FAILED_PRECONDITION "Volume in use … retry with
	// exponential back off"; a missing volume "MUST reply 0 OK", so a
	// NOT_FOUND from a plugin that says it otherwise means the same.
	RPCDeleteVolume: {codes.FailedPrecondition: Retry, codes.NotFound: Done},
	// CreateSnapshot: ALREADY_EXISTS (incompatible) fails, ABORTED
	// (operation pending) retries, RESOURCE_EXHAUSTED "Caller SHOULD fail
	// this request".
	RPCCreateSnapshot: {codes.ResourceExhausted: Fail},
	// DeleteSnapshot: FAILED_PRECONDITION "Snapshot in use … retry with
	// exponential back off"; missing is OK, as for DeleteVolume.
	RPCDeleteSnapshot: {codes.FailedPrecondition: Retry, codes.NotFound: Done},
	// The group snapshot calls have no table in csi-spec.txt; they follow
	// their single-snapshot counterparts.
	RPCCreateVolumeGroupSnapshot: {codes.ResourceExhausted: Fail},
	RPCDeleteVolumeGroupSnapshot: {codes.FailedPrecondition: Retry, codes.NotFound: Done},
}

// Classify returns the outcome of an RPC answering code.
func Classify(rpc string, code codes.Code) Outcome {
	if o, ok := perRPC[rpc][code]; ok {
		return o
	}
	if o, ok := general[code]; ok {
		return o
	}
	return Fail
}

// Rule is one row of the classification table.
type Rule struct {
	RPC     string
	Code    codes.Code
	Outcome Outcome
	// Type is the Temporal application error type the failure carries.
	Type string
}

// Table lists the outcome of every non-OK code for every RPC, in RPC order
// then code order. Codes that no table names fail as Unexpected.
func Table() []Rule {
	var rows []Rule
	for _, group := range [][]string{IdentityRPCs, FenceRPCs, ReplicationRPCs, CSIRPCs} {
		for _, rpc := range group {
			for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
				rows = append(rows, Rule{RPC: rpc, Code: c, Outcome: Classify(rpc, c), Type: TypeFor(rpc, c)})
			}
		}
	}
	return rows
}

// Application error types. The type names the condition; workflows match
// on it (FailedPrecondition above all) and the retry policy lists the
// always-final ones as non-retryable.
const (
	ErrOperationPending   = "OperationPending"   // ABORTED
	ErrNotFound           = "NotFound"           // NOT_FOUND
	ErrUnavailable        = "Unavailable"        // UNAVAILABLE
	ErrDeadlineExceeded   = "DeadlineExceeded"   // DEADLINE_EXCEEDED
	ErrResourceExhausted  = "ResourceExhausted"  // RESOURCE_EXHAUSTED
	ErrInvalidArgument    = "InvalidArgument"    // INVALID_ARGUMENT
	ErrNotImplemented     = "NotImplemented"     // UNIMPLEMENTED
	ErrNotAuthenticated   = "NotAuthenticated"   // UNAUTHENTICATED
	ErrUnknown            = "UnknownError"       // UNKNOWN
	ErrFailedPrecondition = "FailedPrecondition" // FAILED_PRECONDITION
	ErrAlreadyExists      = "AlreadyExists"      // ALREADY_EXISTS: a CSI name taken with other arguments
	ErrInUse              = "InUse"              // FAILED_PRECONDITION of a CSI delete: still in use, retried
	ErrUnexpected         = "Unexpected"         // any other code
	ErrTLS                = "TLSFailure"         // the TLS handshake failed
	ErrBadEndpoint        = "BadEndpoint"        // the endpoint cannot be dialed as configured
	ErrSecretUnavailable  = "SecretUnavailable"  // the worker cannot resolve the plan's secret
)

var typeOfCode = map[codes.Code]string{
	codes.Aborted:            ErrOperationPending,
	codes.NotFound:           ErrNotFound,
	codes.Unavailable:        ErrUnavailable,
	codes.DeadlineExceeded:   ErrDeadlineExceeded,
	codes.ResourceExhausted:  ErrResourceExhausted,
	codes.InvalidArgument:    ErrInvalidArgument,
	codes.Unimplemented:      ErrNotImplemented,
	codes.Unauthenticated:    ErrNotAuthenticated,
	codes.Unknown:            ErrUnknown,
	codes.FailedPrecondition: ErrFailedPrecondition,
	codes.AlreadyExists:      ErrAlreadyExists,
}

// TypeOf returns the application error type for a gRPC code.
func TypeOf(c codes.Code) string {
	if t, ok := typeOfCode[c]; ok {
		return t
	}
	return ErrUnexpected
}

// TypeFor is the application error type of rpc answering c: TypeOf(c),
// but InUse for a FAILED_PRECONDITION the RPC's table retries (a CSI
// delete of a volume or snapshot still in use), so that
// FailedPrecondition stays final everywhere: the workflow decides.
func TypeFor(rpc string, c codes.Code) string {
	if c == codes.FailedPrecondition && Classify(rpc, c) == Retry {
		return ErrInUse
	}
	return TypeOf(c)
}

// NonRetryableTypes are the error types that are final for every RPC. A
// type that is final for some RPCs only (NotFound) is marked non-retryable
// on the error itself.
func NonRetryableTypes() []string {
	seen := map[string]bool{ErrTLS: true, ErrBadEndpoint: true, ErrSecretUnavailable: true, ErrUnexpected: true,
		ErrWorkloadError: true, ErrWorkloadUnhealthy: true, ErrHealthTimeout: true, ErrStillRunning: true}
	// Workflows call this: both loops fill a set that is sorted before it
	// is returned, so the map's order never shows.
	//workflowcheck:ignore
	for c, t := range typeOfCode {
		final := true
		for _, group := range [][]string{IdentityRPCs, FenceRPCs, ReplicationRPCs, CSIRPCs} {
			for _, rpc := range group {
				if o := Classify(rpc, c); TypeFor(rpc, c) == t && (o == Retry || o == Done) {
					final = false
				}
			}
		}
		if final {
			seen[t] = true
		}
	}
	out := make([]string, 0, len(seen))
	//workflowcheck:ignore
	for t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Failure is the detail every storage error carries, for workflows and
// operators: which call, where, on what, and the plugin's own words.
type Failure struct {
	RPC     string `json:"rpc"`
	Site    string `json:"site"`
	Subject string `json:"subject,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (f Failure) String() string {
	where := fmt.Sprintf("%s on site %q", f.RPC, f.Site)
	if f.Subject != "" {
		where += " for " + f.Subject
	}
	return fmt.Sprintf("%s: %s: %s", where, f.Code, f.Message)
}

// classify turns a gRPC error into the Temporal error the activity
// returns; nil when the outcome is Done. The plugin's message is redacted
// of secret values before it goes anywhere.
func classify(rpc string, e Endpoint, subject string, err error, secrets map[string]string) error {
	st, _ := status.FromError(err)
	code := st.Code()
	f := Failure{RPC: rpc, Site: e.Site, Subject: subject, Code: code.String(), Message: redact(st.Message(), secrets)}
	if code == codes.Unavailable && isTLSFailure(st.Message()) {
		f.Code = "TLS handshake failed"
		f.Message += tlsAdvice(f.Message, e)
		return temporal.NewNonRetryableApplicationError(f.String(), ErrTLS, nil, f)
	}
	switch Classify(rpc, code) {
	case Done:
		return nil
	case Retry:
		return temporal.NewApplicationErrorWithOptions(f.String(), TypeFor(rpc, code), temporal.ApplicationErrorOptions{Details: []any{f}})
	default: // Fail and HandBack: Temporal must not retry either
		return temporal.NewNonRetryableApplicationError(f.String(), TypeFor(rpc, code), nil, f)
	}
}

// isTLSFailure tells a handshake failure from an endpoint that is down:
// both arrive as UNAVAILABLE, but only the second goes away by waiting.
func isTLSFailure(msg string) bool {
	return strings.Contains(msg, "authentication handshake failed") ||
		strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:")
}

// setupError wraps a failure that happens before any call is made (bad
// address, unreadable TLS files, unresolvable secret): final, since no
// retry fixes a configuration.
func setupError(rpc string, e Endpoint, subject, typ string, err error) error {
	f := Failure{RPC: rpc, Site: e.Site, Subject: subject, Code: typ, Message: err.Error()}
	return temporal.NewNonRetryableApplicationError(f.String(), typ, nil, f)
}

// FailureOf extracts the storage failure detail from an activity error as
// a workflow sees it, and its type.
func FailureOf(err error) (typ string, f Failure, ok bool) {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		return "", Failure{}, false
	}
	if ae.HasDetails() {
		_ = ae.Details(&f)
	}
	return ae.Type(), f, true
}

// Retryable tells whether a failed attempt of an activity may be tried
// again under the plan's back-off. It reads the decision the activity
// made when it built its error from the table above (Classify): a
// non-retryable error, or a type that is final for every call, ends the
// call; a timeout of the attempt may be retried (the CSI-Addons calls
// are idempotent); a cancellation may not.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		return true
	}
	var ce *temporal.CanceledError
	if errors.As(err, &ce) {
		return false
	}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return !ae.NonRetryable() && !slices.Contains(NonRetryableTypes(), ae.Type())
	}
	return false
}
