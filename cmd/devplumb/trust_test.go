package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// An agent socket in a directory others may write is not the agent's to
// trust: the entry point does not talk to it, says why on stderr, and
// devplumb-direct does the call (its result, its record).
func TestUntrustedSocketFallsBack(t *testing.T) {
	n := newNode(t)
	a := &testAgent{prepare: func(*agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
		return &agentproto.PrepareAnswer{Result: []byte(`{"cniVersion":"1.0.0","ips":[{"address":"203.0.113.66/24"}]}`)}, nil
	}}
	startAgent(t, n.socket, a)
	if err := os.Chmod(filepath.Dir(n.socket), 0o1777); err != nil {
		t.Fatal(err)
	}
	o := n.run("devplumb", "ADD", "eth1", n.stdin())
	if o.code != 0 || !strings.Contains(o.stdout, "192.0.2.10/24") || strings.Contains(o.stdout, "203.0.113.66") ||
		len(n.records()) != 1 || !n.hasLink("eth1") {
		t.Fatalf("ADD beside an untrusted socket: %+v, records %+v: want devplumb-direct's ADD", o, n.records())
	}
	if !strings.Contains(o.stderr, "writable by group or others") || !strings.Contains(o.stderr, directName) {
		t.Errorf("stderr %q does not say why the agent was not used", o.stderr)
	}
	n.mustRun("devplumb", "DEL", "eth1", n.stdin())
}

// An agent answering a delegate run that is not the call's (another cache
// directory, netns, container or interface) is refused: a CNI error naming
// the field, no delegate run, and no fallback (devplumb-direct made no
// record). A run with no netns (a DEL of a gone netns) is the call's.
func TestLyingAgentRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		lie  func(n *node, d *agentproto.Delegate)
		says string
	}{
		{"cache dir", func(n *node, d *agentproto.Delegate) { d.CacheDir = filepath.Join(n.root, "elsewhere") }, `cacheDir "`},
		{"no cache dir", func(n *node, d *agentproto.Delegate) { d.CacheDir = "" }, `cacheDir ""`},
		{"netns", func(n *node, d *agentproto.Delegate) { d.Runtime.NetNS = "/proc/1/ns/net" }, `netns "/proc/1/ns/net"`},
		{"container", func(n *node, d *agentproto.Delegate) { d.Runtime.ContainerID = "other" }, `containerID "other"`},
		{"interface", func(n *node, d *agentproto.Delegate) { d.Runtime.IfName = "eth9" }, `ifName "eth9"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			d := &agentproto.Delegate{CacheDir: n.cacheDir(), Runtime: &agentproto.Runtime{ContainerID: "c1", NetNS: n.pod.Path(), IfName: "eth1"}}
			tc.lie(n, d)
			a := n.bridgeAgent(d)
			a.commit = func(*agentproto.Commit) (*agentproto.CommitAnswer, error) { return &agentproto.CommitAnswer{}, nil }
			startAgent(t, n.socket, a)
			o := n.run("devplumb", "ADD", "eth1", n.stdin())
			if o.code == 0 || !strings.Contains(o.stdout, "not this call's") || !strings.Contains(o.stdout, strings.ReplaceAll(tc.says, `"`, `\"`)) { // as JSON quotes it
				t.Errorf("ADD: %+v, want a CNI error naming %s", o, tc.says)
			}
			if n.hasLink("eth1") || n.hasLink("eth9") || len(n.records()) != 0 || len(a.commits()) != 0 {
				t.Errorf("links in pod %v/%v, records %+v, commits %d: want nothing run, no fallback",
					n.hasLink("eth1"), n.hasLink("eth9"), n.records(), len(a.commits()))
			}
		})
	}
	n := newNode(t)
	a := n.bridgeAgent(&agentproto.Delegate{CacheDir: n.cacheDir(), Runtime: &agentproto.Runtime{ContainerID: "c1", IfName: "eth1"}})
	a.commit = func(c *agentproto.Commit) (*agentproto.CommitAnswer, error) { return &agentproto.CommitAnswer{}, nil }
	startAgent(t, n.socket, a)
	if o := n.run("devplumb", "DEL", "eth1", n.stdin()); o.code != 0 || len(a.commits()) != 1 {
		t.Errorf("DEL with no netns: %+v, commits %d: want it run", o, len(a.commits()))
	}
}

// A config that makes the agent's answer too large for a frame (padded to
// 700 KB) is a CNI error saying so (code 7), printed: devplumb-direct does
// not get it (no record, no interface). So is a config too large to send.
func TestOversizedConfigIsCNIError(t *testing.T) {
	for name, pad := range map[string]int{"answer": 700 << 10, "request": agentproto.MaxFrame} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			n.conf["delegate"].(map[string]any)["pad"] = strings.Repeat("p", pad)
			a := &testAgent{prepare: func(p *agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
				// As the agent's: the delegate list carries the config, here
				// once per plugin of a chain of five.
				return &agentproto.PrepareAnswer{Attachment: "att", Delegate: &agentproto.Delegate{
					ConfList: bytes.Repeat(p.StdinData, 5), CacheDir: n.cacheDir()}}, nil
			}}
			startAgent(t, n.socket, a)
			o := n.run("devplumb", "ADD", "eth1", n.stdin())
			if o.code == 0 || !strings.Contains(o.stdout, `"code": 7`) || !strings.Contains(o.stdout, "too large for the devplumb agent") {
				t.Errorf("ADD: exit %d, stdout %.300s, stderr %.300s: want code 7 saying the config is too large", o.code, o.stdout, o.stderr)
			}
			if len(n.records()) != 0 || n.hasLink("eth1") {
				t.Errorf("records %+v, eth1 in pod %v: devplumb-direct ran", n.records(), n.hasLink("eth1"))
			}
		})
	}
}
