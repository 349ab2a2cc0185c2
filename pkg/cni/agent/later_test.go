package agent

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"
)

// Writes sharing a key run in the order taken, each after the one before it;
// a write of other keys does not wait for them; Await returns once the writes
// of its keys are done.
func TestLaterWritesOrderPerKey(t *testing.T) {
	q := newLaterWrites(8)
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	release := make(chan struct{})
	if !q.Defer([]string{"pod a", "claim c"}, func() { <-release; note("first") }) {
		t.Fatal("first write not taken")
	}
	q.Defer([]string{"claim c"}, func() { note("second, after first by its claim") })
	other := make(chan struct{})
	q.Defer([]string{"pod b"}, func() { note("other pod"); close(other) })
	select {
	case <-other:
	case <-time.After(10 * time.Second):
		t.Fatal("a write of another pod waited for pod a's")
	}
	awaited := make(chan struct{})
	go func() { q.Await(context.Background(), []string{"pod a", "claim c"}); close(awaited) }()
	select {
	case <-awaited:
		t.Fatal("Await returned with pod a's write held")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-awaited
	if !q.close(10 * time.Second) {
		t.Fatal("close: writes still running")
	}
	want := []string{"other pod", "first", "second, after first by its claim"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("order %q, want %q", order, want)
	}
	if n := q.len(); n != 0 || len(q.tails) != 0 {
		t.Errorf("after all writes: %d pending, tails %v", n, q.tails)
	}
}

// A full or closed queue takes nothing (the DEL writes itself); Await's ctx
// bounds its wait; close reports writes that outlast its bound.
func TestLaterWritesRefuseAndBound(t *testing.T) {
	q := newLaterWrites(1)
	release := make(chan struct{})
	if !q.Defer([]string{"pod a"}, func() { <-release }) {
		t.Fatal("write not taken")
	}
	if q.Defer([]string{"pod b"}, func() {}) {
		t.Error("a full queue took a write")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	q.Await(ctx, []string{"pod a"}) // returns by ctx
	if q.close(20 * time.Millisecond) {
		t.Error("close reported done with a write held")
	}
	if q.Defer([]string{"pod c"}, func() {}) {
		t.Error("a closed queue took a write")
	}
	close(release)
	if !q.close(10 * time.Second) {
		t.Error("close: the released write did not end")
	}
}
