package agent

import (
	"context"
	"sync"
	"time"
)

// laterWrites runs DEL's network-status removals after DEL has answered
// (plugin.WriteQueue): the runtime's DEL need not wait for the API server,
// whose answer changes nothing in it. Writes that share a key (a pod) run
// one after the other in the order taken, and an ADD awaits those of its
// keys before its own write, so a removal never lands after the entry a
// later ADD wrote.
type laterWrites struct {
	max int // writes taken and not done at most; beyond, DEL writes itself

	mu     sync.Mutex
	tails  map[string]chan struct{} // per key: closed when its last write is done
	n      int
	closed bool
	done   sync.WaitGroup
}

// defaultMaxLater bounds the removals waiting at once: more than a node's
// pods ever tear down together.
const defaultMaxLater = 1024

func newLaterWrites(max int) *laterWrites {
	return &laterWrites{max: max, tails: map[string]chan struct{}{}}
}

// Defer takes write to run once the writes taken before for any of keys are
// done; false: it takes none (full, or the agent is closing) and the caller
// writes now.
func (q *laterWrites) Defer(keys []string, write func()) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.n >= q.max {
		return false
	}
	done := make(chan struct{})
	var before []chan struct{}
	for _, k := range keys {
		if t := q.tails[k]; t != nil {
			before = append(before, t)
		}
		q.tails[k] = done
	}
	q.n++
	q.done.Add(1)
	go q.run(keys, before, done, write)
	return true
}

func (q *laterWrites) run(keys []string, before []chan struct{}, done chan struct{}, write func()) {
	defer q.done.Done()
	for _, b := range before {
		<-b
	}
	write()
	q.mu.Lock()
	close(done)
	for _, k := range keys {
		if q.tails[k] == done {
			delete(q.tails, k)
		}
	}
	q.n--
	q.mu.Unlock()
}

// Await waits until the writes taken so far for keys are done, or ctx ends
// (the ADD's own write then goes ahead: its bound is the API server's).
func (q *laterWrites) Await(ctx context.Context, keys []string) {
	q.mu.Lock()
	var tails []chan struct{}
	for _, k := range keys {
		if t := q.tails[k]; t != nil {
			tails = append(tails, t)
		}
	}
	q.mu.Unlock()
	for _, t := range tails {
		select {
		case <-t:
		case <-ctx.Done():
			return
		}
	}
}

// len is the number of writes taken and not done.
func (q *laterWrites) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// close takes no more writes and waits up to bound for those taken: each is
// bounded by the API server timeout already. Those still running when the
// agent exits leave an entry of a torn-down attachment, as a crash would.
func (q *laterWrites) close(bound time.Duration) bool {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	finished := make(chan struct{})
	go func() { q.done.Wait(); close(finished) }()
	select {
	case <-finished:
		return true
	case <-time.After(bound):
		return false
	}
}
