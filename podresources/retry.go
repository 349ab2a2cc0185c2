package podresources

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Backoff bounds between attempts refused by the rate limiter. The kubelet
// refills 100 tokens a second, so a few milliseconds usually suffice; the cap
// keeps many clients from retrying in lockstep for long.
const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// backoff doubles from minBackoff/2 to maxBackoff, each wait jittered up to
// twice its base, so clients refused together do not come back together.
func backoff() *wait.Backoff {
	return &wait.Backoff{Duration: minBackoff / 2, Factor: 2, Jitter: 1, Steps: math.MaxInt32, Cap: maxBackoff}
}

// retry runs call until it succeeds, fails with something other than
// ResourceExhausted, or ctx ends, waiting as backoff says between attempts.
func (c *Client) retry(ctx context.Context, method string, call func(context.Context) error) error {
	b := backoff()
	var limited error // the last ResourceExhausted answer
	for attempt := 1; ; attempt++ {
		if l := c.opts.limiter; l != nil {
			if err := l.Wait(ctx); err != nil {
				return fmt.Errorf("PodResources %s on %s: no call within the client's rate limit before the deadline: %w",
					method, c.socket, err)
			}
		}
		err := call(ctx)
		if err == nil {
			return nil
		}
		if limited != nil && ctx.Err() != nil {
			// The deadline passed during a retry: the cause is the limiter.
			return c.limitedErr(method, attempt, limited)
		}
		if !rateLimited(err) {
			return c.describe(method, err)
		}
		limited = err
		wait := b.Step()
		c.opts.log.Debug("PodResources call rate limited, retrying",
			"method", method, "attempt", attempt, "wait", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return c.limitedErr(method, attempt, limited)
		case <-t.C:
		}
	}
}

// rateLimited tells a refusal of the kubelet's rate limiter from gRPC's own
// ResourceExhausted for a message past the size limit, which no retry mends.
func rateLimited(err error) bool {
	st := status.Convert(err)
	return st.Code() == codes.ResourceExhausted && !strings.Contains(st.Message(), "larger than max")
}

func (c *Client) limitedErr(method string, attempts int, err error) error {
	return fmt.Errorf("PodResources %s on %s: still rate limited after %d attempts when the deadline passed: %w",
		method, c.socket, attempts, err)
}

// describe names the socket and the method, and turns "nobody listens" into
// the same hint as a missing socket.
func (c *Client) describe(method string, err error) error {
	switch status.Code(err) {
	case codes.Unavailable:
		return fmt.Errorf("PodResources %s: socket %s not answering (%s): is the kubelet running and the path mounted?: %w",
			method, c.socket, status.Convert(err).Message(), errors.Join(ErrUnavailable, err))
	case codes.DeadlineExceeded:
		return fmt.Errorf("PodResources %s on %s: no answer within the deadline: %w", method, c.socket, err)
	}
	return fmt.Errorf("PodResources %s on %s: %w", method, c.socket, err)
}
