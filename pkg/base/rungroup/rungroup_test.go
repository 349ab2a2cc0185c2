package rungroup

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestFirstFailureStopsAll: one server failing ends the others' context, and
// Run returns that failure once all have ended.
func TestFirstFailureStopsAll(t *testing.T) {
	boom := errors.New("boom")
	var stopped atomic.Int32
	waiter := func(ctx context.Context) error {
		<-ctx.Done()
		stopped.Add(1)
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), waiter, func(context.Context) error { return boom }, waiter)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Fatalf("Run: %v, want %v", err, boom)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a failing server did not stop the others")
	}
	if n := stopped.Load(); n != 2 {
		t.Fatalf("%d servers saw their context end before Run returned, want 2", n)
	}
}

// TestEndsWithItsContext: without failures Run returns nil when ctx ends,
// and a server ending early with nil does not stop the others.
func TestEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, func(context.Context) error { return nil }, func(ctx context.Context) error {
			<-ctx.Done()
			ran.Store(true)
			return nil
		})
	}()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v before its context ended", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil || !ran.Load() {
		t.Fatalf("Run: %v (server ran to its end: %v), want nil", err, ran.Load())
	}
}
