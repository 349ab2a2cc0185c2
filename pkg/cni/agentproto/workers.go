package agentproto

import (
	"sync"
	"time"
)

// Workers runs functions on goroutines that ran earlier ones, when one is
// idle, as gRPC's server workers do: a new goroutine's stack starts small and
// is copied to one twice its size each time a call's depth outgrows it, a
// tenth of the agent's instructions for an ADD (P10). A Server serves each
// connection on its own Workers; the node agent runs a call's background work
// (its lookahead Get, its API writes) on others. An idle worker waits for the
// next function for the idle time given, then ends; all end with Stop.
type Workers struct {
	idle time.Duration
	next chan func() // unbuffered: a send succeeds only on an idle worker
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// WorkerIdle is how long a worker waits for more work: pods start in bursts,
// and a few parked goroutines cost a few pages.
const WorkerIdle = time.Minute

// NewWorkers returns workers that wait idle for more work before they end.
func NewWorkers(idle time.Duration) *Workers {
	return &Workers{idle: idle, next: make(chan func()), done: make(chan struct{})}
}

// Go runs f on an idle worker, else on a new one.
func (w *Workers) Go(f func()) {
	select {
	case w.next <- f:
	default:
		w.wg.Go(func() { w.work(f) })
	}
}

func (w *Workers) work(f func()) {
	t := time.NewTimer(w.idle)
	defer t.Stop()
	for {
		f()
		t.Reset(w.idle)
		select {
		case f = <-w.next:
		case <-t.C:
			return
		case <-w.done:
			return
		}
	}
}

// Stop ends the idle workers and waits for all: a busy one ends after its
// function returns. Go after Stop still runs its function, on a new goroutine.
func (w *Workers) Stop() {
	w.once.Do(func() { close(w.done) })
	w.wg.Wait()
}
