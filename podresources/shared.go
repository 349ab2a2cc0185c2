package podresources

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// WithSharedCalls makes a client serving many callers at once (the node
// agent's) make at most one call at a time: a Get that arrives while another
// is in flight waits for one List, shared by every Get that arrived
// meanwhile and started after they did, so each answer is as fresh as its
// own Get would be. A burst of pods then costs the kubelet a few calls, not
// one per pod, and none is refused by its rate limiter.
func WithSharedCalls() Option {
	return func(o *options) { o.shared = true }
}

// rounds are the shared Lists of a client WithSharedCalls.
type rounds struct {
	mu   sync.Mutex
	busy bool   // a call of this client is in flight
	next *round // the List the Gets arriving while busy wait for
}

type round struct {
	done chan struct{}
	pods []*v1.PodResources
	err  error
}

// sharedGet is Get for a client WithSharedCalls.
func (c *Client) sharedGet(ctx context.Context, namespace, name string) (*v1.PodResources, error) {
	r := &c.rounds
	r.mu.Lock()
	if !r.busy {
		r.busy = true
		r.mu.Unlock()
		defer c.nextRound()
		return c.ownGet(ctx, namespace, name)
	}
	if r.next == nil {
		r.next = &round{done: make(chan struct{})}
	}
	next := r.next
	r.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("PodResources Get of pod %s/%s on %s: waiting for a shared List: %w", namespace, name, c.socket, ctx.Err())
	case <-next.done:
	}
	if next.err != nil {
		return nil, next.err
	}
	return inList(next.pods, namespace, name)
}

// nextRound runs the List the Gets that came meanwhile wait for, if any,
// else marks the client idle.
func (c *Client) nextRound() {
	r := &c.rounds
	r.mu.Lock()
	next := r.next
	r.next = nil
	if next == nil {
		r.busy = false
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.timeout)
		defer cancel()
		next.pods, next.err = c.list(ctx)
		close(next.done)
		c.nextRound()
	}()
}
