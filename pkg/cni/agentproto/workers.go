package agentproto

import (
	"context"
	"sync"
	"time"
)

// workers runs each connection on a goroutine that served an earlier one,
// when one is idle, as gRPC's server workers do: a new goroutine's stack
// starts small and is copied to one twice its size each time a call's depth
// outgrows it, a tenth of the agent's instructions for an ADD (P10). An idle
// worker waits idle for the next connection, then ends; all end with stop.
type workers struct {
	ctx  context.Context
	end  context.CancelFunc
	idle time.Duration
	next chan func() // unbuffered: a send succeeds only on an idle worker
	wg   sync.WaitGroup
}

// workerIdle is how long a worker waits for another connection: pods start
// in bursts, and a few parked goroutines cost a few pages.
const workerIdle = time.Minute

func newWorkers(ctx context.Context, idle time.Duration) *workers {
	ctx, end := context.WithCancel(ctx)
	return &workers{ctx: ctx, end: end, idle: idle, next: make(chan func())}
}

// run runs f on an idle worker, else on a new one.
func (w *workers) run(f func()) {
	select {
	case w.next <- f:
	default:
		w.wg.Go(func() { w.work(f) })
	}
}

func (w *workers) work(f func()) {
	t := time.NewTimer(w.idle)
	defer t.Stop()
	for {
		f()
		t.Reset(w.idle)
		select {
		case f = <-w.next:
		case <-t.C:
			return
		case <-w.ctx.Done():
			return
		}
	}
}

// stop ends the idle workers and waits for all: a busy one ends after its f.
func (w *workers) stop() {
	w.end()
	w.wg.Wait()
}
