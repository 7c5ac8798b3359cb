package activities

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAtOwnDeadline: a call's DEADLINE_EXCEEDED within 100 ms of the
// activity's own deadline is that deadline (the server ended the stream
// a moment before the client's context did); earlier, it is the
// storage's own answer, and other codes are never the deadline.
func TestAtOwnDeadline(t *testing.T) {
	dl := status.Error(codes.DeadlineExceeded, "stream terminated by RST_STREAM with error code: CANCEL")
	near, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	far, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"at the deadline", near, dl, true},
		{"an hour before it", far, dl, false},
		{"no deadline", context.Background(), dl, false},
		{"another code at the deadline", near, status.Error(codes.Unavailable, "x"), false},
	} {
		if got := atOwnDeadline(c.ctx, c.err); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
