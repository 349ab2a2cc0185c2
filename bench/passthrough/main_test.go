package main

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/bench/statuscall"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// The pass-through runs its delegate (the real bridge and host-local) in the
// pod's netns and prints the delegate's result; its DEL takes the interface
// away again.
func TestPassthroughRunsItsDelegate(t *testing.T) {
	pod := testenv.NetNS(t)
	dir := t.TempDir()
	bridge := testenv.UniqueName("ptbr")
	t.Cleanup(func() { // the bridge plugin's DEL leaves the host's bridge
		if l, err := netlink.LinkByName(bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "pass", "type": "passthrough",
		"cacheDir": filepath.Join(dir, "cache"), "delegate": map[string]any{"type": "bridge", "bridge": bridge,
			"ipam": map[string]any{"type": "host-local", "subnet": "192.0.2.0/24", "dataDir": filepath.Join(dir, "ipam")}}})
	if err != nil {
		t.Fatal(err)
	}
	args := &skel.CmdArgs{ContainerID: "c1", Netns: pod.Path(), IfName: "net1", Path: testenv.CNIPlugins(t), StdinData: conf}
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
	pod := testenv.NetNS(t)
	dir := t.TempDir()
	bridge := testenv.UniqueName("ptbr")
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	socket := filepath.Join(dir, "statusd.sock")
	calls, answer := fakeDaemon(t, socket)
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "pass", "type": "passthrough",
		"cacheDir": filepath.Join(dir, "cache"), "statusSocket": socket, "delegate": map[string]any{"type": "bridge", "bridge": bridge,
			"ipam": map[string]any{"type": "host-local", "subnet": "192.0.2.0/24", "dataDir": filepath.Join(dir, "ipam")}}})
	if err != nil {
		t.Fatal(err)
	}
	args := &skel.CmdArgs{ContainerID: "c1", Netns: pod.Path(), IfName: "net1", Path: testenv.CNIPlugins(t), StdinData: conf,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=pod1;K8S_POD_UID=u1"}
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
	_, err = testenv.Stdout(t, func() error { return run(args, true) })
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
