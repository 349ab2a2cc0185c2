package main

import (
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/shape"
)

// An agent answering a share's delegates with its rate: the entry point,
// which runs them, shapes the interface in the pod's netns to the rate
// each way (read back from the kernel) before it commits.
func TestAgentShareShapedHere(t *testing.T) {
	n := newNode(t)
	a := n.bridgeAgent(&agentproto.Delegate{CacheDir: n.cacheDir(),
		Shape: &agentproto.Shape{Share: "ResourceClaim default/c1 device d/p/dev-a share s1", Rate: 300_000_000}})
	var shaped *shape.Shaped
	a.commit = func(c *agentproto.Commit) (*agentproto.CommitAnswer, error) {
		if len(c.Result) == 0 {
			return &agentproto.CommitAnswer{}, nil // the DEL's
		}
		var err error
		if shaped, err = shape.Read(n.pod.Path(), "eth1"); err != nil {
			t.Errorf("at commit: %v", err)
		}
		return &agentproto.CommitAnswer{Result: c.Result, Error: c.Error}, nil
	}
	startAgent(t, n.socket, a)
	n.mustRun("devplumb", "ADD", "eth1", n.stdin())
	if shaped == nil || shaped.Send != 300_000_000 || shaped.Receive != 300_000_000 {
		t.Fatalf("eth1 shaped %+v at commit, want 300M each way", shaped)
	}
	// DEL in a netns that lives on: the delegates' DEL takes eth1, the
	// entry point the share's ifb.
	n.mustRun("devplumb", "DEL", "eth1", n.stdin())
	if n.hasLink("eth1") || n.hasLink(shape.IfbName("eth1")) {
		t.Errorf("after DEL: eth1 %v, its ifb %v", n.hasLink("eth1"), n.hasLink(shape.IfbName("eth1")))
	}
}

// A commit that fails after the share was shaped (network-status refused)
// is undone whole: the delegates' DEL and the ifb.
func TestAgentShareUndone(t *testing.T) {
	n := newNode(t)
	a := n.bridgeAgent(&agentproto.Delegate{CacheDir: n.cacheDir(),
		Shape: &agentproto.Shape{Share: "share s1", Rate: 300_000_000}})
	shapedAtCommit := false
	a.commit = func(*agentproto.Commit) (*agentproto.CommitAnswer, error) {
		_, err := shape.Read(n.pod.Path(), "eth1")
		shapedAtCommit = err == nil
		return &agentproto.CommitAnswer{Error: &types.Error{Code: 106, Msg: "test agent: refused"}, Undo: true}, nil
	}
	startAgent(t, n.socket, a)
	if o := n.run("devplumb", "ADD", "eth1", n.stdin()); o.code == 0 {
		t.Fatalf("ADD: %+v, want the commit's error", o)
	}
	if !shapedAtCommit || n.hasLink("eth1") || n.hasLink(shape.IfbName("eth1")) {
		t.Errorf("shaped at commit %v; after the undo eth1 %v, its ifb %v", shapedAtCommit, n.hasLink("eth1"), n.hasLink(shape.IfbName("eth1")))
	}
}

// When the interface cannot be shaped (the pod holds a link by the ifb's
// name), the entry point undoes the delegates' ADD and commits the error,
// code 108, naming the share and its rate; the runtime sees it.
func TestAgentShareShapingFails(t *testing.T) {
	n := newNode(t)
	share := "ResourceClaim default/c1 device d/p/dev-a share s1"
	a := n.bridgeAgent(&agentproto.Delegate{CacheDir: n.cacheDir(), Shape: &agentproto.Shape{Share: share, Rate: 300_000_000}})
	a.commit = func(c *agentproto.Commit) (*agentproto.CommitAnswer, error) {
		return &agentproto.CommitAnswer{Result: c.Result, Error: c.Error}, nil
	}
	startAgent(t, n.socket, a)
	if err := n.pod.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: shape.IfbName("eth1")}, PeerName: "peer0"})
	}); err != nil {
		t.Fatal(err)
	}
	o := n.run("devplumb", "ADD", "eth1", n.stdin())
	want := share + ": bandwidth 300000000 bit/s cannot be enforced on eth1"
	commits := a.commits()
	if len(commits) != 1 || commits[0].Error == nil || commits[0].Error.Code != shapeErrCode || !strings.Contains(commits[0].Error.Msg, want) {
		t.Fatalf("commits %+v, want one with code %d and %q", commits, shapeErrCode, want)
	}
	if o.code == 0 || !strings.Contains(o.stdout, want) || n.hasLink("eth1") || !n.hasLink(shape.IfbName("eth1")) {
		t.Errorf("ADD %+v, eth1 left %v, the pod's own link kept %v: want the error printed, eth1 removed",
			o, n.hasLink("eth1"), n.hasLink(shape.IfbName("eth1")))
	}
}
