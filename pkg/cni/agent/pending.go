package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
)

// entry is one prepared call waiting for its commit (or, for an ADD whose
// commit asked for an undo, its rollback): exactly one of add and del.
type entry struct {
	add *plugin.PreparedAdd
	del *plugin.PreparedDel
	// conn is the connection that prepared the call: only it may commit or
	// roll it back. nil: prepared outside a server (a direct call).
	conn *agentproto.Conn
}

// close gives the call up as a crash would.
func (e *entry) close() {
	if e.add != nil {
		e.add.Close()
	} else {
		e.del.Close()
	}
}

// pendingTable holds prepared calls by a random id. A call is taken out
// whole for its commit, so no two requests ever use one prepared call (they
// are not safe for concurrent use); one not taken within ttl is closed.
type pendingTable struct {
	ttl time.Duration
	max int
	log *slog.Logger

	mu      sync.Mutex
	entries map[string]*slot
	closed  bool
}

// slot is one stay of an entry in the table: an entry put back (to wait for
// its rollback) gets a new one, so a timer of its first stay that fired
// just as it was taken cannot expire it.
type slot struct {
	e     *entry
	timer *time.Timer
}

// errNotYours is a commit or rollback of a call another connection prepared.
var errNotYours = errors.New("prepared on another connection: only the connection that prepared a call may finish it")

func newPendingTable(ttl time.Duration, max int, log *slog.Logger) *pendingTable {
	return &pendingTable{ttl: ttl, max: max, log: log, entries: map[string]*slot{}}
}

// put keeps e under a fresh id. A full table refuses it: the caller gives
// the call up and the entry point falls back to devplumb-direct.
func (t *pendingTable) put(e *entry) (string, error) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(b[:])
	return id, t.putBack(id, e)
}

// putBack keeps e under id again, for another ttl.
func (t *pendingTable) putBack(id string, e *entry) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return fmt.Errorf("the agent is stopping")
	case len(t.entries) >= t.max:
		return fmt.Errorf("%d prepared calls wait for their commit already, the most the agent keeps", len(t.entries))
	}
	sl := &slot{e: e}
	sl.timer = time.AfterFunc(t.ttl, func() { t.expire(id, sl) })
	t.entries[id] = sl
	return nil
}

// bind ties the call id names to the connection of ctx, before its id is
// answered (nobody else can name it yet): only that connection may take it,
// and when the connection ends without finishing it, it is given up as a
// crash would (the record stays in progress for the next ADD, DEL,
// devplumb-direct or gc to repair), not kept for the ttl.
func (t *pendingTable) bind(ctx context.Context, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sl := t.entries[id]
	if sl == nil {
		return
	}
	e := sl.e
	e.conn = agentproto.ConnOf(ctx)
	context.AfterFunc(ctx, func() { t.drop(id, e) })
}

// take removes and returns the call id names, if the connection of ctx is
// the one that prepared it; another's is refused and left waiting.
func (t *pendingTable) take(ctx context.Context, id string) (*entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sl := t.entries[id]
	if sl == nil {
		return nil, fmt.Errorf("attachment %q: %w", id, errUnknown)
	}
	if c := agentproto.ConnOf(ctx); c != sl.e.conn {
		return nil, fmt.Errorf("attachment %q: %w", id, errNotYours)
	}
	delete(t.entries, id)
	sl.timer.Stop()
	return sl.e, nil
}

// expire closes sl's entry if it still waits in sl under id (a commit may
// have taken it just before the timer fired).
func (t *pendingTable) expire(id string, sl *slot) {
	t.mu.Lock()
	if t.entries[id] != sl {
		t.mu.Unlock()
		return
	}
	delete(t.entries, id)
	t.mu.Unlock()
	t.log.Warn("a prepared call was never committed: giving it up for the next ADD, DEL or gc to undo",
		"attachment", id, "after", t.ttl)
	sl.e.close()
}

// drop gives e up when it still waits under id: its connection ended
// without its commit or rollback.
func (t *pendingTable) drop(id string, e *entry) {
	t.mu.Lock()
	sl := t.entries[id]
	if sl == nil || sl.e != e {
		t.mu.Unlock()
		return
	}
	delete(t.entries, id)
	sl.timer.Stop()
	t.mu.Unlock()
	t.log.Warn("a prepared call's connection ended before its commit: giving it up for the next ADD, DEL or gc to undo",
		"attachment", id)
	e.close()
}

// closeAll gives up every pending call and refuses new ones.
func (t *pendingTable) closeAll() {
	t.mu.Lock()
	all := t.entries
	t.entries, t.closed = map[string]*slot{}, true
	t.mu.Unlock()
	for _, sl := range all {
		sl.timer.Stop()
		sl.e.close()
	}
}

// len is the number of calls waiting.
func (t *pendingTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}
