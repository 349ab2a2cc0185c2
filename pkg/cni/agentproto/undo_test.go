package agentproto

import (
	"context"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// A commit answered with Undo is followed by a Rollback on the same
// connection, which the handler sees with the delegates' DEL error.
func TestUndoThenRollback(t *testing.T) {
	s := serve(t, t.TempDir(), Server{})
	for _, delErr := range []*types.Error{nil, types.NewError(11, "DEL failed", "")} {
		c := dial(t, s.path)
		a, err := c.Prepare(context.Background(), &Prepare{Command: CmdAdd, ContainerID: "c1", IfName: "net1"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Commit(context.Background(), &Commit{Attachment: a.Attachment, Result: []byte("undo")})
		if err != nil || !got.Undo || got.Error == nil || got.Error.Code != 106 {
			t.Fatalf("commit answer %+v, %v: want the error and an undo", got, err)
		}
		if rb, err := c.Rollback(context.Background(), &Rollback{Attachment: a.Attachment, Error: delErr}); err != nil || rb == nil {
			t.Errorf("rollback answer %+v, %v (DEL error %v)", rb, err, delErr)
		}
	}
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if len(s.h.rolledBack) != 2 || s.h.rolledBack[0].Error != nil || s.h.rolledBack[1].Error.Msg != "DEL failed" {
		t.Errorf("rollbacks seen %+v", s.h.rolledBack)
	}
}

// noRollback is a handler that never asks for an undo.
type noRollback struct{ Handler }

// An undo without an error is refused by the client (the entry point would
// not know what to print); a rollback to a handler without Rollback, or
// without an attachment, is an agent failure: the entry point falls back.
func TestUndoRefusals(t *testing.T) {
	s := serve(t, t.TempDir(), Server{})
	c := dial(t, s.path)
	_, err := c.Commit(context.Background(), &Commit{Attachment: "a", Result: []byte("bad undo")})
	wantUnavailable(t, err, "asks for an undo but holds no error")

	c = dial(t, s.path)
	_, err = c.Rollback(context.Background(), &Rollback{})
	wantUnavailable(t, err, "rollback: attachment is required")

	plain := serve(t, t.TempDir(), Server{Handler: noRollback{&testHandler{}}})
	c = dial(t, plain.path)
	_, err = c.Rollback(context.Background(), &Rollback{Attachment: "a"})
	wantUnavailable(t, err, "this agent never asks for an undo")
}
