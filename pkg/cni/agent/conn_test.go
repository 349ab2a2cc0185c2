package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// A prepared call is the connection's that prepared it: a commit naming it
// from another connection is refused and leaves it waiting, and its own
// connection commits it.
func TestCommitFromAnotherConnectionRefused(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	c, a, raw := e.prepareAndRun("net1")
	other, err := agentproto.Dial(e.socket, 5*time.Second, "intruder")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = other.Commit(t.Context(), &agentproto.Commit{Attachment: a.Attachment, Error: &types.Error{Code: 999, Msg: "undo it"}})
	if err == nil || !strings.Contains(err.Error(), "prepared on another connection") {
		t.Fatalf("commit from another connection: %v, want it refused", err)
	}
	if n := e.agent.pending.len(); n != 1 {
		t.Fatalf("%d calls pending after the refused commit, want the call still waiting", n)
	}
	got, err := c.Commit(t.Context(), &agentproto.Commit{Attachment: a.Attachment, Result: raw})
	if err != nil || got.Error != nil || !e.InPod("net1") {
		t.Fatalf("commit from the preparing connection: %+v, %v, in pod %v", got, err, e.InPod("net1"))
	}
}

// A connection that ends with its call prepared and not committed (an entry
// point killed while its delegates ran) takes the call with it: the agent
// keeps nothing of it, its commit is unknown, and devplumb-direct's ADD
// repairs what it left as after a crash.
func TestPendingDroppedOnClose(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	c, a, raw := e.prepareAndRun("net1")
	c.Close()
	deadline := time.Now().Add(10 * time.Second) // a bound on a wait, not a speed
	for e.agent.pending.len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still pending after their connection closed", e.agent.pending.len())
		}
		time.Sleep(time.Millisecond)
	}
	if recs := e.Records(); len(recs) != 1 || recs[0].Complete {
		t.Errorf("records %+v, want the call's record left in progress", recs)
	}
	again, err := agentproto.Dial(e.socket, 5*time.Second, "entry-test")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, err := again.Commit(t.Context(), &agentproto.Commit{Attachment: a.Attachment, Result: raw}); !errors.Is(err, agentproto.ErrUnavailable) ||
		!strings.Contains(err.Error(), "no prepared call") {
		t.Errorf("commit after the connection closed: %v, want no such call", err)
	}
	if _, err := testenv.Stdout(t, func() error { return e.direct().Add(e.args("net1")) }); err != nil || !e.InPod("net1") {
		t.Errorf("devplumb-direct's ADD after the dropped call: %v, in pod %v", err, e.InPod("net1"))
	}
}
