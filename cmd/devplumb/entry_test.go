package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// Without an agent socket the entry point is devplumb-direct: the same
// results, errors and exit codes for ADD, DEL and a failing ADD, and the
// same record and interface left behind.
func TestNoAgentIsDevplumbDirect(t *testing.T) {
	n := newNode(t)
	stdin := n.stdin()
	var out [2][3]outcome
	for i, bin := range []string{"devplumb", directName} {
		out[i][0] = n.run(bin, "ADD", "eth1", stdin)
		if out[i][0].code != 0 || !n.hasLink("eth1") || len(n.records()) != 1 || !n.records()[0].Complete {
			t.Fatalf("%s ADD: %+v, eth1 in pod %v, records %+v", bin, out[i][0], n.hasLink("eth1"), n.records())
		}
		// A second attachment finds no free device: a CNI error.
		out[i][1] = n.run(bin, "ADD", "eth2", stdin)
		out[i][2] = n.run(bin, "DEL", "eth1", stdin)
		if n.hasLink("eth1") || len(n.records()) != 0 {
			t.Fatalf("%s DEL left eth1 (%v) or records %+v", bin, n.hasLink("eth1"), n.records())
		}
	}
	entry, direct := out[0], out[1]
	if !sameResult(entry[0].stdout, direct[0].stdout) || !strings.Contains(entry[0].stdout, "192.0.2.10/24") {
		t.Errorf("ADD results differ:\nentry point %s\ndevplumb-direct %s", entry[0].stdout, direct[0].stdout)
	}
	for i, what := range []string{"ADD", "ADD without a free device", "DEL"} {
		if entry[i].code != direct[i].code || (i > 0 && entry[i].stdout != direct[i].stdout) {
			t.Errorf("%s: entry point %+v, devplumb-direct %+v", what, entry[i], direct[i])
		}
	}
	if entry[1].code == 0 || !strings.Contains(entry[1].stdout, "no free device") {
		t.Errorf("ADD without a free device: %+v, want devplumb-direct's CNI error", entry[1])
	}
}

// On fallback devplumb-direct reads the whole config the runtime gave, even
// one larger than a pipe's buffer: the delegate config recorded holds all of
// its 100 KiB.
func TestFallbackStdinIntact(t *testing.T) {
	n := newNode(t)
	pad := strings.Repeat("0123456789abcdef", 100<<10/16)
	n.conf["delegate"].(map[string]any)["pad"] = pad
	n.mustRun("devplumb", "ADD", "eth1", n.stdin())
	recs := n.records()
	if len(recs) != 1 || !strings.Contains(string(recs[0].Delegate), pad) {
		t.Fatalf("records %d; the recorded delegate config does not hold the 100 KiB pad", len(recs))
	}
	n.mustRun("devplumb", "DEL", "eth1", n.stdin())
}

// An agent that accepts and never answers, or fails prepare, costs the call
// nothing but the wait: devplumb-direct does it.
func TestBrokenAgentFallsBack(t *testing.T) {
	for name, start := range map[string]func(*node){
		"silent": func(n *node) { silentAgent(t, n.socket) },
		"failing prepare": func(n *node) {
			startAgent(t, n.socket, &testAgent{prepare: func(*agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
				return nil, errors.New("test agent: cannot prepare")
			}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			start(n)
			out := n.mustRun("devplumb", "ADD", "eth1", n.stdin())
			if !strings.Contains(out, "192.0.2.10/24") || len(n.records()) != 1 || !n.hasLink("eth1") {
				t.Fatalf("ADD through a %s agent: %s, records %+v", name, out, n.records())
			}
			n.mustRun("devplumb", "DEL", "eth1", n.stdin())
			if len(n.records()) != 0 || n.hasLink("eth1") {
				t.Fatalf("DEL through a %s agent left records %+v", name, n.records())
			}
		})
	}
}

// An agent answering a delegate: the entry point runs it in the runtime's
// netns, with the runtime's CNI_PATH, keeps its result in devplumb's libcni
// cache, commits its result and prints what the commit answers. DEL alike.
func TestAgentDelegateRunsHere(t *testing.T) {
	n := newNode(t)
	a := n.bridgeAgent(nil)
	a.commit = func(c *agentproto.Commit) (*agentproto.CommitAnswer, error) {
		if c.Error != nil {
			return &agentproto.CommitAnswer{Error: c.Error}, nil
		}
		return &agentproto.CommitAnswer{Result: append([]byte("answered "), c.Result...)}, nil
	}
	startAgent(t, n.socket, a)
	out := n.mustRun("devplumb", "ADD", "eth1", n.stdin())
	commits := a.commits()
	if len(commits) != 1 || commits[0].Attachment != "att-eth1" || !strings.Contains(string(commits[0].Result), "192.0.2.20/24") {
		t.Fatalf("commits %+v, want one with the bridge's result", commits)
	}
	if out != "answered "+string(commits[0].Result) {
		t.Errorf("printed %q, want the commit's answer", out)
	}
	if !n.hasLink("eth1") || len(n.records()) != 0 {
		t.Fatalf("eth1 in pod %v, records %+v: the delegate should have run here, devplumb-direct not at all", n.hasLink("eth1"), n.records())
	}
	cached, _ := filepath.Glob(filepath.Join(n.stateDir(), "libcni", "br-net", "results", "*"))
	if len(cached) != 1 {
		t.Errorf("libcni cache %v, want the ADD's result in devplumb's cache", cached)
	}
	n.mustRun("devplumb", "DEL", "eth1", n.stdin())
	if n.hasLink("eth1") || len(a.commits()) != 2 || a.commits()[1].Error != nil {
		t.Errorf("DEL through the agent: eth1 left %v, commits %+v", n.hasLink("eth1"), a.commits())
	}
}

// A commit that fails after the delegates' ADD succeeded, asking for the
// undo: the entry point runs the delegates' DEL (the interface leaves the
// pod), rolls back, and prints the commit's error. The agent's cache
// directory is the one used.
func TestAgentCommitUndone(t *testing.T) {
	n := newNode(t)
	cache := n.cacheDir()
	a := n.bridgeAgent(&agentproto.Delegate{CacheDir: cache,
		Runtime: &agentproto.Runtime{ContainerID: "c1", NetNS: n.pod.Path(), IfName: "eth1"}})
	refused := &types.Error{Code: 106, Msg: "test agent: network-status refused"}
	inPod := false
	a.commit = func(c *agentproto.Commit) (*agentproto.CommitAnswer, error) {
		inPod = n.hasLink("eth1")
		cached, _ := filepath.Glob(filepath.Join(cache, "results", "*"))
		if len(cached) != 1 {
			t.Errorf("libcni cache %v, want the ADD's result in the agent's cache directory", cached)
		}
		return &agentproto.CommitAnswer{Error: refused, Undo: true}, nil
	}
	startAgent(t, n.socket, a)
	o := n.run("devplumb", "ADD", "eth1", n.stdin())
	if o.code == 0 || !strings.Contains(o.stdout, refused.Msg) {
		t.Errorf("ADD: %+v, want the commit's error", o)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !inPod || n.hasLink("eth1") || len(a.rollbacks) != 1 || a.rollbacks[0].Attachment != "att-eth1" || a.rollbacks[0].Error != nil {
		t.Errorf("eth1 in pod at commit %v, after %v; rollbacks %+v: want the delegates' DEL run and rolled back", inPod, n.hasLink("eth7"), a.rollbacks)
	}
}

// A repeated ADD the agent answers with the result it had: printed, nothing
// run, no commit.
func TestAgentReplay(t *testing.T) {
	n := newNode(t)
	a := &testAgent{prepare: func(*agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
		return &agentproto.PrepareAnswer{Result: []byte(`{"cniVersion":"1.0.0","ips":[{"address":"192.0.2.99/24"}]}`)}, nil
	}}
	startAgent(t, n.socket, a)
	out := n.mustRun("devplumb", "ADD", "eth1", n.stdin())
	if out != `{"cniVersion":"1.0.0","ips":[{"address":"192.0.2.99/24"}]}` || n.hasLink("eth1") || len(a.commits()) != 0 {
		t.Errorf("replayed ADD printed %q, eth1 in pod %v, commits %d", out, n.hasLink("eth1"), len(a.commits()))
	}
}

// bridgeAgent answers every prepare with a bridge delegate (address
// 192.0.2.20/24), d's runtime and cache directory when d is given.
func (n *node) bridgeAgent(d *agentproto.Delegate) *testAgent {
	n.t.Helper()
	list, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "br-net",
		"plugins": []any{n.bridgeConf("192.0.2.20/24")}})
	if err != nil {
		n.t.Fatal(err)
	}
	if d == nil {
		d = &agentproto.Delegate{CacheDir: n.cacheDir()}
	}
	d.ConfList = list
	return &testAgent{prepare: func(p *agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
		return &agentproto.PrepareAnswer{Attachment: "att-" + p.IfName, Delegate: d}, nil
	}}
}

// VERSION needs neither an agent nor devplumb-direct.
func TestVersionAlone(t *testing.T) {
	n := newNode(t)
	lone := loneEntry(t, n)
	cmd := exec.Command(lone)
	cmd.Env = []string{"CNI_COMMAND=VERSION", socketEnv + "=" + n.socket}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("VERSION: %v", err)
	}
	var v struct {
		Supported []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(out, &v); err != nil || strings.Join(v.Supported, ",") != strings.Join(supportedVersions, ",") {
		t.Errorf("VERSION printed %s (%v), want %v", out, err, supportedVersions)
	}
	// Any other command needs devplumb-direct: a CNI error naming it.
	out, err = n.loneRun(lone, "ADD", nil)
	if err == nil || !strings.Contains(string(out), filepath.Join(filepath.Dir(lone), directName)) || !strings.Contains(string(out), n.socket) {
		t.Errorf("ADD without devplumb-direct: %v %s, want a CNI error naming %s and the agent socket", err, out, directName)
	}
}

// Run by another devplumb (a delegate that is devplumb, even a copy without
// devplumb-direct), the entry point refuses ADD and lets DEL succeed, as
// devplumb-direct does: a recursion ends at once.
func TestUnderDevplumbRefused(t *testing.T) {
	n := newNode(t)
	lone := loneEntry(t, n)
	out, err := n.loneRun(lone, "ADD", []string{depthEnv + "=1"})
	if err == nil || !strings.Contains(string(out), `"code": 7`) || !strings.Contains(string(out), "itself") {
		t.Errorf("ADD under devplumb: %v %s, want code 7 saying devplumb cannot delegate to itself", err, out)
	}
	if out, err := n.loneRun(lone, "DEL", []string{depthEnv + "=1"}); err != nil {
		t.Errorf("DEL under devplumb: %v %s, want success doing nothing", err, out)
	}
}

// loneEntry is a copy of the entry point in a directory of its own.
func loneEntry(t *testing.T, n *node) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.bin, "devplumb"))
	if err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(t.TempDir(), "devplumb")
	if err := os.WriteFile(lone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return lone
}

// loneRun runs binary for the node's pod with only the CNI variables and env.
func (n *node) loneRun(binary, cmd string, env []string) ([]byte, error) {
	c := exec.Command(binary)
	c.Env = append([]string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=c1", "CNI_NETNS=" + n.pod.Path(), "CNI_IFNAME=eth1",
		"CNI_PATH=" + n.bin, socketEnv + "=" + n.socket, nodeconfig.Env + "=" + n.nodeConfig}, env...)
	c.Stdin = bytes.NewReader(n.stdin())
	return c.Output()
}

// testAgent is a Handler of canned answers that keeps the commits it got.
type testAgent struct {
	prepare   func(*agentproto.Prepare) (*agentproto.PrepareAnswer, error)
	commit    func(*agentproto.Commit) (*agentproto.CommitAnswer, error)
	mu        sync.Mutex
	got       []*agentproto.Commit
	rollbacks []*agentproto.Rollback
}

func (a *testAgent) Build() string { return "test-agent" }

func (a *testAgent) Prepare(_ context.Context, p *agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
	return a.prepare(p)
}

func (a *testAgent) Commit(_ context.Context, c *agentproto.Commit) (*agentproto.CommitAnswer, error) {
	a.mu.Lock()
	a.got = append(a.got, c)
	a.mu.Unlock()
	return a.commit(c)
}

func (a *testAgent) Rollback(_ context.Context, r *agentproto.Rollback) (*agentproto.RollbackAnswer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rollbacks = append(a.rollbacks, r)
	return &agentproto.RollbackAnswer{}, nil
}

func (a *testAgent) commits() []*agentproto.Commit {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*agentproto.Commit(nil), a.got...)
}

// startAgent serves h on socket until the test ends.
func startAgent(t *testing.T, socket string, h agentproto.Handler) context.CancelFunc {
	t.Helper()
	l, err := agentproto.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agentproto.Serve(ctx, l, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return cancel
}

// silentAgent accepts connections on socket and never answers.
func silentAgent(t *testing.T, socket string) {
	t.Helper()
	l, err := agentproto.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
}

// skelArgs is a prepare as pkg/cni/plugin takes it.
func skelArgs(p *agentproto.Prepare) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: p.ContainerID, Netns: p.Netns, IfName: p.IfName, Args: p.Args, Path: p.Path,
		StdinData: p.StdinData}
}

// With a node config that does not load, an agent's answers cannot be
// checked: the entry point, which reads it while the agent answers its
// hello, sends no ADD prepare (which would take a device) and leaves the
// call to devplumb-direct, which reads the same file and says what is wrong.
func TestUnreadableNodeConfigIsDevplumbDirect(t *testing.T) {
	n := newNode(t)
	var mu sync.Mutex
	prepared := 0
	startAgent(t, n.socket, &testAgent{prepare: func(*agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
		mu.Lock()
		defer mu.Unlock()
		prepared++
		return nil, errors.New("test agent: the entry point prepared a call it cannot check")
	}})
	if err := os.WriteFile(n.nodeConfig, []byte(`{"stateDir": `), 0o644); err != nil {
		t.Fatal(err)
	}
	o := n.run("devplumb", "ADD", "eth1", n.stdin())
	mu.Lock()
	defer mu.Unlock()
	if o.code == 0 || prepared != 0 || !strings.Contains(o.stderr, "doing the call with "+directName) ||
		!strings.Contains(o.stdout, n.nodeConfig) || len(n.records()) != 0 {
		t.Errorf("ADD with a broken node config: %+v, %d prepares sent, records %+v; want devplumb-direct's error naming %s, no prepare",
			o, prepared, n.records(), n.nodeConfig)
	}
}
