package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/bench/statuscall"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// The pass-through runs its delegate (the real bridge and host-local) in the
// pod's netns and prints the delegate's result; its DEL takes the interface
// away again.
func TestPassthroughRunsItsDelegate(t *testing.T) {
	args, pod := passCall(t, nil)
	out, err := testenv.Stdout(t, func() error { return run(args, true) })
	if err != nil || !strings.Contains(out, "192.0.2.2/24") || !testenv.HasLink(t, pod, "net1") {
		t.Fatalf("ADD: %v, printed %s, net1 in the pod %v", err, out, testenv.HasLink(t, pod, "net1"))
	}
	if err := run(args, false); err != nil || testenv.HasLink(t, pod, "net1") {
		t.Errorf("DEL: %v, net1 in the pod %v", err, testenv.HasLink(t, pod, "net1"))
	}
	args.StdinData = []byte(`{"cniVersion":"1.0.0","name":"pass","delegate":{}}`)
	if err := run(args, true); err == nil || !strings.Contains(err.Error(), "passthrough delegate") {
		t.Errorf("ADD with a delegate without a type: %v, want the delegate config refused", err)
	}
}

// With a status socket, the pass-through hands the daemon its ADD's result, after
// the delegate ran and before it prints it, and its DEL, with the pod of CNI_ARGS; a
// daemon's refusal fails the call.
func TestPassthroughTellsTheStatusDaemon(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "statusd.sock")
	calls, answer := fakeDaemon(t, socket)
	args, _ := passCall(t, map[string]any{"statusSocket": socket})
	answer <- "ok"
	if _, err := testenv.Stdout(t, func() error { return run(args, true) }); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	add := <-calls
	if !add.Add || add.Namespace != "ns1" || add.Pod != "pod1" || add.Network != "pass" || !strings.Contains(string(add.Result), "192.0.2.2/24") {
		t.Errorf("ADD told the daemon %+v (result %s), want the pod ns1/pod1, network pass and the delegate's result", add, add.Result)
	}
	answer <- "ok"
	if err := run(args, false); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if del := <-calls; del.Add || del.Pod != "pod1" || del.Result != nil {
		t.Errorf("DEL told the daemon %+v, want a DEL of pod1 with no result", del)
	}
	answer <- "error: no such pod"
	_, err := testenv.Stdout(t, func() error { return run(args, true) })
	<-calls
	if err == nil || !strings.Contains(err.Error(), "no such pod") {
		t.Errorf("ADD the daemon refused: %v, want its error", err)
	}
	answer <- "ok"
	if err := run(args, false); err != nil { // the delegate's interface goes
		t.Errorf("DEL after the refused ADD: %v", err)
	}
	<-calls
}

// passCall is an ADD or DEL of the pass-through in a new netns, its delegate the real
// bridge and host-local, its config with extra keys, CNI_ARGS naming the pod ns1/pod1.
func passCall(t *testing.T, extra map[string]any) (*skel.CmdArgs, ns.NetNS) {
	t.Helper()
	pod := testenv.NetNS(t)
	dir := t.TempDir()
	bridge := testenv.UniqueName("ptbr")
	t.Cleanup(func() { // the bridge plugin's DEL leaves the host's bridge
		if l, err := netlink.LinkByName(bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	conf := map[string]any{"cniVersion": "1.0.0", "name": "pass", "type": "passthrough",
		"cacheDir": filepath.Join(dir, "cache"), "delegate": map[string]any{"type": "bridge", "bridge": bridge,
			"ipam": map[string]any{"type": "host-local", "subnet": "192.0.2.0/24", "dataDir": filepath.Join(dir, "ipam")}}}
	maps.Copy(conf, extra)
	data, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	return &skel.CmdArgs{ContainerID: "c1", Netns: pod.Path(), IfName: "net1", Path: testenv.CNIPlugins(t), StdinData: data,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=pod1;K8S_POD_UID=u1"}, pod
}

// With an agent socket, the pass-through makes the entry point's round trips: an
// ADD's prepare after the hello, its delegate, a commit with the delegate's result,
// and prints what the commit answers; a DEL's prepare with the hello, its delegate,
// a commit. Without an agent there, the call fails before its delegate runs.
func TestPassthroughMakesTheAgentsRoundTrips(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent", "agent.sock")
	args, pod := passCall(t, map[string]any{"agentSocket": socket})
	_, err := testenv.Stdout(t, func() error { return run(args, true) })
	if err == nil || !strings.Contains(err.Error(), "passthrough agent") || testenv.HasLink(t, pod, "net1") {
		t.Fatalf("ADD without an agent: %v, net1 in the pod %v; want an error before the delegate ran", err, testenv.HasLink(t, pod, "net1"))
	}
	a := &recordingAgent{}
	l, err := agentproto.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agentproto.Serve(ctx, l, a) }()
	t.Cleanup(func() { cancel(); <-done })
	out, err := testenv.Stdout(t, func() error { return run(args, true) })
	if err != nil || out != "answered" || !testenv.HasLink(t, pod, "net1") {
		t.Fatalf("ADD: %v, printed %q (want the commit's answer), net1 in the pod %v", err, out, testenv.HasLink(t, pod, "net1"))
	}
	if err := run(args, false); err != nil || testenv.HasLink(t, pod, "net1") {
		t.Fatalf("DEL: %v, net1 in the pod %v", err, testenv.HasLink(t, pod, "net1"))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	want := []string{"prepare ADD c1", "commit c1/net1 192.0.2.2/24", "prepare DEL c1", "commit c1/net1 "}
	if !slices.Equal(a.calls, want) {
		t.Errorf("the agent saw %q, want %q", a.calls, want)
	}
}

// recordingAgent answers as make bench's idle agent does and notes each call: a
// prepare's command and container, a commit's attachment and its result's address.
type recordingAgent struct {
	mu    sync.Mutex
	calls []string
}

func (a *recordingAgent) Build() string { return "recording" }

func (a *recordingAgent) Prepare(_ context.Context, p *agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
	a.note("prepare " + p.Command + " " + p.ContainerID)
	return &agentproto.PrepareAnswer{Attachment: p.ContainerID + "/" + p.IfName, Delegate: &agentproto.Delegate{ConfList: p.StdinData}}, nil
}

func (a *recordingAgent) Commit(_ context.Context, c *agentproto.Commit) (*agentproto.CommitAnswer, error) {
	addr := ""
	if m := regexp.MustCompile(`[0-9.]+/24`).Find(c.Result); m != nil {
		addr = string(m)
	}
	a.note("commit " + c.Attachment + " " + addr)
	return &agentproto.CommitAnswer{Result: []byte("answered")}, nil
}

func (a *recordingAgent) note(s string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, s)
}

// fakeDaemon serves statuscall on socket: each call goes to calls, and is answered
// with the next line from answer.
func fakeDaemon(t *testing.T, socket string) (<-chan statuscall.Call, chan<- string) {
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	calls, answer := make(chan statuscall.Call, 1), make(chan string, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			var c statuscall.Call
			_ = json.NewDecoder(conn).Decode(&c)
			fmt.Fprintln(conn, <-answer)
			conn.Close()
			calls <- c
		}
	}()
	return calls, answer
}
