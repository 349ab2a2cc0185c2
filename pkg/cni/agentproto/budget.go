package agentproto

import (
	"fmt"
	"sync"
	"time"
)

// budget is the bytes of requests the server holds across all connections.
// A connection takes from it as its frames' bytes arrive and gives back what
// it took when it ends, so a peer's frames cost the agent at most the budget
// however many connections it opens or however much it announces.
type budget struct {
	mu    sync.Mutex
	free  int64
	total int64
	freed chan struct{} // closed and replaced whenever bytes are given back
}

func newBudget(total int64) *budget {
	return &budget{free: total, total: total, freed: make(chan struct{})}
}

// take takes n bytes, waiting at most wait for others to give some back.
func (b *budget) take(n int64, wait time.Duration) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-timer.C:
			return fmt.Errorf("agent busy: its %d bytes for requests in flight stayed taken for %v", b.total, wait)
		}
	}
}

// give returns n bytes and wakes whoever waits.
func (b *budget) give(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.free += n
	close(b.freed)
	b.freed = make(chan struct{})
}

// held is one connection's share of a budget.
type held struct {
	b    *budget
	wait time.Duration
	n    int64
}

func (h *held) take(n int) error {
	if err := h.b.take(int64(n), h.wait); err != nil {
		return err
	}
	h.n += int64(n)
	return nil
}

// release gives back everything the connection took.
func (h *held) release() {
	h.b.give(h.n)
	h.n = 0
}
