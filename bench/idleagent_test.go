package bench

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// The idle agent answers the entry point's calls at once: an ADD's prepare with the
// call's config as the delegate to run, its commit with the result it was given, a
// DEL's prepare sent with the hello.
func TestIdleAgentAnswers(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "idle", "agent.sock")
	stop, err := startIdleAgent(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	p := &agentproto.Prepare{Command: agentproto.CmdAdd, ContainerID: "c1", IfName: "net1", StdinData: []byte(`{"name":"n"}`)}
	c, err := agentproto.Dial(socket, time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ans, err := c.Prepare(ctx, p)
	if err != nil || ans.Attachment != "c1/net1" || ans.Delegate == nil || !bytes.Equal(ans.Delegate.ConfList, p.StdinData) {
		t.Fatalf("ADD prepare: %+v, %v", ans, err)
	}
	out, err := c.Commit(ctx, &agentproto.Commit{Attachment: ans.Attachment, Result: []byte(`{"ips":[]}`)})
	if err != nil || string(out.Result) != `{"ips":[]}` {
		t.Fatalf("ADD commit: %+v, %v", out, err)
	}
	p.Command = agentproto.CmdDel
	d, ans, err := agentproto.DialDel(ctx, socket, time.Second, "test", p)
	if err != nil || ans.Attachment != "c1/net1" {
		t.Fatalf("DEL prepare with the hello: %+v, %v", ans, err)
	}
	defer d.Close()
	if _, err := d.Commit(ctx, &agentproto.Commit{Attachment: ans.Attachment}); err != nil {
		t.Fatalf("DEL commit: %v", err)
	}
}

// The note on the least an agent-based meta-plugin costs: the reference over the
// pass-through, the plain row over the reference, and what the target leaves.
func TestLeastAgentNote(t *testing.T) {
	vs := []*variant{{net: "floor", ms: []float64{100}}, {net: "pass", ms: []float64{120}},
		{net: "passagent", ms: []float64{125}}, {net: "dpagent", ms: []float64{130}}}
	note := leastAgentNote(vs, 100, 20)
	for _, want := range []string{"5.0 ms over the pass-through (1.04 ×)", "5.0 ms over that (1.04 × it)", "leaves 1.0 ms"} {
		if !strings.Contains(note, want) {
			t.Errorf("note lacks %q:\n%s", want, note)
		}
	}
	if note := leastAgentNote(vs[:3], 100, 20); note != "" {
		t.Errorf("a note without the agent's row: %q", note)
	}
}

// With paired rounds, the note gives the least's paired time and the plain row's over it.
func TestLeastAgentNotePaired(t *testing.T) {
	vs := []*variant{{net: "floor", ms: []float64{100}}, {net: "pass", ms: []float64{120}, paired: []float64{120, 121, 122}},
		{net: "passagent", ms: []float64{125}, paired: []float64{123, 124, 125}}, {net: "dpagent", ms: []float64{130}, paired: []float64{130, 131, 132}}}
	note := leastAgentNote(vs, 100, 20)
	for _, want := range []string{"In the 3 paired rounds: that least 3.0 ms over the pass-through", "the plain row 7.0 ms over that least"} {
		if !strings.Contains(note, want) {
			t.Errorf("note lacks %q:\n%s", want, note)
		}
	}
}
