package agentproto

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// goroutineID is the running goroutine's number, from its stack's header.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return string(bytes.Fields(buf)[1])
}

// A connection after an earlier one ended runs on the earlier one's
// goroutine; two at once run on two; idle workers end after their idle
// wait, and all end with stop.
func TestWorkersReuse(t *testing.T) {
	w := NewWorkers(time.Hour)
	ids := make(chan string, 4)
	ran := func() { ids <- goroutineID() }
	w.Go(ran)
	first := <-ids
	// The worker parks once f returns; give it the moment that takes.
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.Go(ran)
		if id := <-ids; id == first {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("never reused: %s then %s", first, id)
		}
	}
	release := make(chan struct{})
	block := func() { ids <- goroutineID(); <-release }
	w.Go(block)
	w.Go(block)
	if a, b := <-ids, <-ids; a == b {
		t.Errorf("two connections at once on one goroutine %s", a)
	}
	close(release)
	done := make(chan struct{})
	go func() { w.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not end the workers")
	}
}

func TestWorkersEndWhenIdle(t *testing.T) {
	w := NewWorkers(10 * time.Millisecond)
	defer w.Stop()
	ids := make(chan string, 1)
	w.Go(func() { ids <- goroutineID() })
	first := <-ids
	// A worker left idle five times its idle wait has ended, so the next
	// function runs on a new goroutine; a worker the scheduler kept from
	// its timer so long may still take it, and then waits afresh.
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(50 * time.Millisecond)
		w.Go(func() { ids <- goroutineID() })
		if <-ids != first {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a worker idle far past its idle wait kept serving (%s)", first)
		}
	}
}
