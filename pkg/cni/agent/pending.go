package agent

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/plugin"
)

// entry is one prepared call waiting for its commit (or, for an ADD whose
// commit asked for an undo, its rollback): exactly one of add and del.
type entry struct {
	add *plugin.PreparedAdd
	del *plugin.PreparedDel
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

// take removes and returns the call id names.
func (t *pendingTable) take(id string) (*entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sl := t.entries[id]
	if sl == nil {
		return nil, fmt.Errorf("attachment %q: %w", id, errUnknown)
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
