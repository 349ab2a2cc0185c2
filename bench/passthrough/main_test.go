package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/vishvananda/netlink"

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
