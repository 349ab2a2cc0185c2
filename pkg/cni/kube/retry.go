package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Backoff between attempts: short, because a CNI ADD waits for it, and jittered, because a
// conflict means another writer is active and lockstep retries would collide again.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// backoff doubles from minBackoff/2 to maxBackoff, each wait jittered up to
// twice its base.
func backoff() *wait.Backoff {
	return &wait.Backoff{Duration: minBackoff / 2, Factor: 2, Jitter: 1, Steps: math.MaxInt32, Cap: maxBackoff}
}

// retry runs op until it is done, fails with an error that retrying cannot fix, or ctx
// ends. op returns done=true to stop with its error (nil or not); done=false with an error
// asks for another attempt when the error is transient (conflict, transport, 429, 5xx).
func (c *Client) retry(ctx context.Context, op func(context.Context) (bool, error)) error {
	b := backoff()
	var last error
	for attempt := 1; ; attempt++ {
		done, err := op(ctx)
		if done || err == nil {
			return err
		}
		if !transient(err) {
			return err
		}
		last = err
		if apierrors.IsConflict(err) {
			// The object moved on: read it again soon, do not wait long.
			b = backoff()
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return fmt.Errorf("cancelled after %d attempts: %w", attempt, last)
			}
			return c.boundError(attempt, last)
		case <-time.After(b.Step()):
		}
	}
}

// boundError explains why the bound ran out: still conflicting, or never reached.
func (c *Client) boundError(attempts int, last error) error {
	if apierrors.IsConflict(last) {
		return fmt.Errorf("still conflicting after %d attempts within %s: %w", attempts, c.timeout, last)
	}
	if status := apierrors.APIStatus(nil); errors.As(last, &status) {
		return fmt.Errorf("API server %s kept failing for %s (%d attempts): %w", c.host, c.timeout, attempts, last)
	}
	return fmt.Errorf("%w: %s did not answer within %s (%d attempts), last error: %w", ErrUnreachable, c.host, c.timeout, attempts, last)
}

// transient tells whether another attempt can succeed where this one failed.
func transient(err error) bool {
	if badCertificate(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// No answer from the server at all: connection refused, reset, timeout.
		return true
	}
	return apierrors.IsConflict(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}

// badCertificate tells whether the server's certificate failed verification: the
// kubeconfig names another CA or host. Retrying cannot fix that, and calling it
// "unreachable" after the whole bound would send the operator after the wrong problem.
func badCertificate(err error) bool {
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &host) || errors.As(err, &invalid)
}

func isAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
