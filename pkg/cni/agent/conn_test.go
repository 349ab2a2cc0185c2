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

// An ADD's lookahead starts the pod's PodResources Get before the prepare
// comes, and the prepare takes that Get's answer (one Get per ADD); a
// connection that ends after its lookahead, before its prepare (an entry
// point that fell back), takes nothing and leaves the agent holding nothing.
func TestLookaheadStartsTheGetAndTakesNothing(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	p := e.prepare(agentproto.CmdAdd, "net1")
	c, err := agentproto.DialAdd(e.socket, 5*time.Second, "entry-test", &p)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lookahead's PodResources Get", func() bool { return e.PodResources.Calls("Get") == 1 })
	c.Close()
	waitFor(t, "the lookahead given up", func() bool { return e.agent.looked.len() == 0 })
	if recs := e.Records(); len(recs) != 0 || !e.onHost(0) {
		t.Fatalf("records %+v, device on the host %v, after a lookahead alone: want nothing taken", recs, e.onHost(0))
	}
	if o := e.call(agentproto.CmdAdd, "net1"); o.Err != nil || o.Committed == nil || o.Committed.Error != nil || !e.InPod("net1") {
		t.Fatalf("ADD through the agent: %+v, in pod %v", o, e.InPod("net1"))
	}
	if n := e.PodResources.Calls("Get"); n != 2 {
		t.Errorf("%d PodResources Gets after the lookahead alone and one ADD, want 2: the second is the ADD's lookahead's, which its prepare takes rather than asking again", n)
	}
	if n := e.agent.looked.len(); n != 0 {
		t.Errorf("%d lookaheads held after the ADD's prepare took its own", n)
	}
}

// waitFor waits until cond holds; 10 s bound a wait, not a speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
