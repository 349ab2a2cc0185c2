package agentproto

import (
	"context"
	"sync"
	"testing"
	"time"
)

// connHandler keeps the context of each request it serves.
type connHandler struct {
	*testHandler
	mu   sync.Mutex
	ctxs []context.Context
}

func (h *connHandler) Prepare(ctx context.Context, p *Prepare) (*PrepareAnswer, error) {
	h.keep(ctx)
	return h.testHandler.Prepare(ctx, p)
}

func (h *connHandler) Commit(ctx context.Context, c *Commit) (*CommitAnswer, error) {
	h.keep(ctx)
	return h.testHandler.Commit(ctx, c)
}

func (h *connHandler) keep(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ctxs = append(h.ctxs, ctx)
}

// A handler's requests carry their connection: the same for a prepare and
// its commit, another for another connection, and their context ends when
// the connection does (what a Handler ties prepared calls to).
func TestConnOfRequests(t *testing.T) {
	h := &connHandler{testHandler: &testHandler{}}
	s := serve(t, t.TempDir(), Server{Handler: h})
	first, second := dial(t, s.path), dial(t, s.path)
	for _, c := range []*Client{first, second} {
		a, err := c.Prepare(context.Background(), &Prepare{Command: CmdAdd, ContainerID: "c", IfName: "net1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Commit(context.Background(), &Commit{Attachment: a.Attachment}); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	ctxs := h.ctxs
	h.mu.Unlock()
	conns := []*Conn{ConnOf(ctxs[0]), ConnOf(ctxs[1]), ConnOf(ctxs[2]), ConnOf(ctxs[3])}
	if conns[0] == nil || conns[0] != conns[1] || conns[2] != conns[3] || conns[0] == conns[2] {
		t.Fatalf("connections of prepare, commit (first) and prepare, commit (second): %p %p %p %p", conns[0], conns[1], conns[2], conns[3])
	}
	if ConnOf(context.Background()) != nil {
		t.Error("a context outside a server has a connection")
	}
	first.Close()
	select {
	case <-ctxs[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first connection's context did not end with it")
	}
	if ctxs[2].Err() != nil {
		t.Error("the second connection's context ended with the first")
	}
}
