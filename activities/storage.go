package activities

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Storage holds the storage activities: one method per CSI-Addons RPC
// plus the polling activities built on them. Register it once on a
// worker; workflows refer to its methods through a nil pointer.
type Storage struct {
	Dialer  *Dialer
	Secrets SecretResolver
	// ids remembers which driver answers at each address, for the
	// recorded deviations (deviate).
	ids identities
	// flights are the replication calls local attempts gave up on
	// (flight.go), whose outcome the next attempt takes.
	flights flights
	// SeparateAttempts makes every attempt its own call, as when each
	// lands on another worker (tests).
	SeparateAttempts bool
}

// NewStorage returns storage activities with a fresh connection cache,
// resolving secrets from the worker's environment and files.
func NewStorage() *Storage {
	return &Storage{Dialer: NewDialer(), Secrets: EnvFileSecrets{}}
}

// Close closes the cached connections.
func (s *Storage) Close() error { return s.Dialer.Close() }

// call runs one RPC against e with its own deadline and turns the outcome
// into what the activity returns. Secrets are resolved here, on the
// worker, only when the RPC carries them.
func (s *Storage) call(ctx context.Context, rpc string, e Endpoint, subject string, withSecrets bool,
	fn func(ctx context.Context, conn *grpc.ClientConn, secrets map[string]string) error) error {
	conn, release, err := s.Dialer.Lease(e)
	if err != nil {
		typ := ErrBadEndpoint
		if errors.Is(err, errTLSConfig) {
			typ = ErrTLS
		}
		return setupError(rpc, e, subject, typ, err)
	}
	forget := false
	defer func() { release(forget) }()
	var secrets map[string]string
	if withSecrets && e.Secret != nil {
		if secrets, err = s.Secrets.Resolve(e.Secret); err != nil {
			return setupError(rpc, e, subject, ErrSecretUnavailable, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, e.deadline())
	defer cancel()
	start := time.Now()
	err = fn(cctx, conn, secrets)
	log := logger(ctx)
	took := time.Since(start).Round(time.Millisecond)
	if err == nil {
		log.Debug("storage call", "rpc", rpc, "site", e.Site, "subject", subject, "took", took)
		return nil
	}
	if ctx.Err() != nil {
		// The activity itself was cancelled or timed out: report that, not
		// the call's view of it.
		return ctx.Err()
	}
	if atOwnDeadline(ctx, err) {
		return context.DeadlineExceeded
	}
	if status.Code(err) == codes.Unavailable && !isTLSFailure(status.Convert(err).Message()) && mayBeTLSMistake(err) {
		// A broken pipe or an EOF before the server's preface can be a
		// TLS mistake the connection does not name: ask the endpoint.
		if why := diagnoseTLS(ctx, e); why != "" {
			err = status.Error(codes.Unavailable, status.Convert(err).Message()+": tls: "+why)
		}
	}
	err = s.deviate(ctx, rpc, e, conn, err)
	out := classify(rpc, e, subject, err, secrets)
	if typ, _, ok := FailureOf(out); ok && typ == ErrTLS {
		forget = true // reread the TLS files on the next attempt
	}
	log.Info("storage call failed", "rpc", rpc, "site", e.Site, "subject", subject,
		"code", status.Code(err).String(), "outcome", Classify(rpc, status.Code(err)).String(), "took", took)
	return out
}

// atOwnDeadline tells a call that ended DEADLINE_EXCEEDED at the
// activity's own deadline: the server enforces the deadline the client
// sent and may end the stream ("stream terminated by RST_STREAM with
// error code: CANCEL") a moment before the client's context says the
// deadline passed. Seen under load on a local attempt cut at its budget,
// whose end the workflow then took for the storage's failure.
func atOwnDeadline(ctx context.Context, err error) bool {
	dl, ok := ctx.Deadline()
	return ok && status.Code(err) == codes.DeadlineExceeded && time.Until(dl) < ownDeadlineSlack
}

// ownDeadlineSlack is how close to the activity's deadline a call's
// DEADLINE_EXCEEDED is taken for that deadline.
const ownDeadlineSlack = 100 * time.Millisecond

// logger is the activity's logger, or a no-op outside an activity (the
// polling loops call the RPC helpers directly in tests).
func logger(ctx context.Context) interface {
	Debug(string, ...any)
	Info(string, ...any)
} {
	if activity.IsActivity(ctx) {
		return activity.GetLogger(ctx)
	}
	return nopLogger{}
}

type nopLogger struct{}

func (nopLogger) Debug(string, ...any) {}
func (nopLogger) Info(string, ...any)  {}
