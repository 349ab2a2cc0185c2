package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
)

// lostAgent prepares with the real plugin (the device taken, the record
// written incomplete, the delegate answered) and stops when the commit comes,
// as an agent restarted while the delegate ran.
type lostAgent struct {
	t        *testing.T
	stop     context.CancelFunc
	mu       sync.Mutex
	prepared []*plugin.PreparedAdd
}

func (a *lostAgent) Build() string { return "lost-agent" }

func (a *lostAgent) Prepare(_ context.Context, p *agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
	prep, err := plugin.New().PrepareAdd(skelArgs(p))
	if err != nil {
		return nil, fmt.Errorf("test agent: %w", err)
	}
	a.mu.Lock()
	a.prepared = append(a.prepared, prep)
	a.mu.Unlock()
	if prep.Delegate == nil {
		return nil, errors.New("test agent: nothing to run")
	}
	return &agentproto.PrepareAnswer{Attachment: "att", Delegate: &agentproto.Delegate{
		ConfList: prep.Delegate.ConfList, CapabilityArgs: prep.Delegate.Runtime.CapabilityArgs, CacheDir: prep.Delegate.CacheDir}}, nil
}

func (a *lostAgent) Commit(ctx context.Context, _ *agentproto.Commit) (*agentproto.CommitAnswer, error) {
	a.stop()
	<-ctx.Done()
	return nil, errors.New("test agent: stopped")
}

// An agent lost after its prepare, with the delegate run: the entry point
// execs devplumb-direct, whose ADD finds the record incomplete, undoes the
// recorded delegate (its result in the libcni cache both use) and adds
// afresh. The record ends complete, which only devplumb-direct can have done.
func TestAgentLostAfterPrepare(t *testing.T) {
	// The plugin's prepare marks this process one devplumb deep for its
	// delegates: restored when the test ends.
	t.Setenv(depthEnv, "")
	n := newNode(t)
	a := &lostAgent{t: t}
	a.stop = startAgent(t, n.socket, a)
	out := n.mustRun("devplumb", "ADD", "eth1", n.stdin())
	a.mu.Lock()
	if len(a.prepared) != 1 {
		t.Fatalf("the agent prepared %d calls, want 1", len(a.prepared))
	}
	a.prepared[0].Close() // the agent's process is gone: nothing it held stays
	a.mu.Unlock()
	recs := n.records()
	if len(recs) != 1 || !recs[0].Complete || !strings.Contains(out, "192.0.2.10/24") || !n.hasLink("eth1") {
		t.Fatalf("ADD after the agent was lost: %s, records %+v, eth1 in pod %v", out, recs, n.hasLink("eth1"))
	}
	n.mustRun("devplumb", "DEL", "eth1", n.stdin())
	if recs := n.records(); len(recs) != 0 || n.hasLink("eth1") {
		t.Errorf("DEL left records %+v or eth1 (%v)", recs, n.hasLink("eth1"))
	}
}
