package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/pkg/testenv"
)

func parentIndex(t *testing.T, n ns.NetNS, ifName string) int {
	t.Helper()
	idx := -1
	if err := n.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(ifName)
		if err == nil {
			idx = l.Attrs().ParentIndex
		}
		return err
	}); err != nil {
		t.Fatalf("%s in pod: %v", ifName, err)
	}
	return idx
}

func hostIndex(t *testing.T, name string) int {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

// Two macvlan attachments of one pod on one resource get the pod's two
// devices as masters, with host-local addresses.
func TestMacvlanTwoAttachmentsTwoDevices(t *testing.T) {
	e := newEnv(t)
	dev0, dev1 := testenv.VethPair(t, "dpv")+"a", testenv.VethPair(t, "dpv")+"a"
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", dev0, dev1)
	ipamDir := filepath.Join(e.root, "ipam")
	conf := e.conf("mv-net", map[string]any{"type": "macvlan", "mode": "bridge",
		"ipam": map[string]any{"type": "host-local", "subnet": "10.77.0.0/24", "dataDir": ipamDir}})
	conf["injectDeviceID"] = []string{"master"}
	e.install(conf)
	args := podArgs("default", "p1")
	e.mustCnitool("add", "mv-net", pod.Path(), "net1", args, "")
	e.mustCnitool("add", "mv-net", pod.Path(), "net2", args, "")

	got := map[int]bool{parentIndex(t, pod, "net1"): true, parentIndex(t, pod, "net2"): true}
	if !got[hostIndex(t, dev0)] || !got[hostIndex(t, dev1)] {
		t.Fatalf("masters %v, want dpm0 and dpm1", got)
	}
	st := e.state()
	if len(st) != 2 || st[0].DeviceID == st[1].DeviceID {
		t.Fatalf("claims %+v", st)
	}
	for _, a := range st {
		if a.NetworkStatus == nil || len(a.NetworkStatus.IPs) != 1 || a.NetworkStatus.Mac == "" {
			t.Errorf("network-status %+v", a.NetworkStatus)
		}
	}
	// A third attachment has no device left: a clear error naming the pod.
	_, errOut, err := e.cnitool("add", "mv-net", pod.Path(), "net3", args, "")
	if err == nil || !contains(errOut, "no free device") || !contains(errOut, "default/p1") {
		t.Errorf("third attachment: %v %s", err, errOut)
	}
	for _, ifName := range []string{"net1", "net2"} {
		e.mustCnitool("del", "mv-net", pod.Path(), ifName, args, "")
		if linkIn(t, pod, ifName) {
			t.Errorf("%s left in pod", ifName)
		}
	}
	if st := e.state(); len(st) != 0 {
		t.Errorf("claims left: %+v", st)
	}
	leases, _ := os.ReadDir(filepath.Join(ipamDir, "mv-net"))
	for _, l := range leases {
		if l.Name() != "lock" && l.Name()[:4] == "10.7" {
			t.Errorf("IP lease left: %s", l.Name())
		}
	}
}

// A bridge chain (bridge with static IPAM, then the recorder) runs as a
// conflist: the recorder sees the bridge's result as prevResult, and (as
// with Multus) only the first plugin gets the injected device keys.
func TestBridgeChainStaticIPAM(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "dev-a")
	bridge := testenv.UniqueName("dpbr")
	conf := e.conf("br-net", nil)
	delete(conf, "delegate")
	conf["cniVersion"] = "0.4.0"
	conf["delegates"] = []any{
		map[string]any{"type": "bridge", "bridge": bridge,
			"ipam": map[string]any{"type": "static", "addresses": []any{map[string]string{"address": "192.0.2.10/24"}}}},
		e.recorder(nil),
	}
	e.install(conf)
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	args := podArgs("default", "p1")
	out := e.mustCnitool("add", "br-net", pod.Path(), "eth1", args, "")
	if !contains(out, `"cniVersion": "0.4.0"`) || !contains(out, "192.0.2.10/24") {
		t.Errorf("result %s", out)
	}
	_, stdin := e.record("ADD", testenv.CnitoolID(pod.Path()), "eth1")
	prev, _ := stdin["prevResult"].(map[string]any)
	if prev == nil || stdin["deviceID"] != nil {
		t.Errorf("recorder in chain got %v", stdin)
	}
	st := e.state()
	if len(st) != 1 || st[0].NetworkStatus == nil || len(st[0].NetworkStatus.IPs) != 1 || st[0].NetworkStatus.IPs[0] != "192.0.2.10" {
		t.Fatalf("state %+v", st)
	}
	e.mustCnitool("check", "br-net", pod.Path(), "eth1", args, "")
	e.mustCnitool("del", "br-net", pod.Path(), "eth1", args, "")
	if linkIn(t, pod, "eth1") {
		t.Error("eth1 left in pod")
	}
}

// A delegate failing after an earlier one in the chain succeeded leaves
// nothing: no interface, no IP lease, no CNI file, no claim.
func TestFailingDelegateLeavesNothing(t *testing.T) {
	e := newEnv(t)
	dev := testenv.VethPair(t, "dpv") + "a"
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", dev)
	e.writeDP(dev, pciInfo("0000:01:00.1"))
	ipamDir := filepath.Join(e.root, "ipam")
	conf := e.conf("fail-net", nil)
	delete(conf, "delegate")
	conf["injectDeviceID"] = []string{"master"}
	conf["delegates"] = []any{
		map[string]any{"type": "macvlan", "ipam": map[string]any{"type": "host-local", "subnet": "10.78.0.0/24", "dataDir": ipamDir}},
		e.recorder(map[string]any{"failAdd": true}),
	}
	e.install(conf)
	_, errOut, err := e.cnitool("add", "fail-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	if err == nil || !contains(errOut, "failing ADD as configured") {
		t.Fatalf("ADD should fail with the delegate's message: %v %s", err, errOut)
	}
	if linkIn(t, pod, "net1") {
		t.Error("macvlan left in pod after rollback")
	}
	if entries, _ := os.ReadDir(filepath.Join(e.devinfoDir, "cni")); len(entries) != 0 {
		t.Errorf("CNI files left: %v", entries)
	}
	if st := e.state(); len(st) != 0 {
		t.Errorf("claims left: %+v", st)
	}
	if leases, _ := os.ReadDir(filepath.Join(ipamDir, "fail-net")); len(leases) > 2 {
		t.Errorf("IP leases left: %v", leases)
	}
	e.record("DEL", testenv.CnitoolID(pod.Path()), "net1") // the rollback ran DEL
}

// DEL without ADD, and DEL twice, succeed: nothing is there to remove.
func TestDelWithoutAdd(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	conf := e.conf("mv-net", map[string]any{"type": "macvlan", "master": "lo"})
	e.install(conf)
	for range 2 {
		e.mustCnitool("del", "mv-net", pod.Path(), "net1", podArgs("default", "ghost"), "")
	}
	// Directly, with no netns at all, as runtimes do for a sandbox already gone.
	if _, ce := e.run("DEL", mustJSON(t, conf), "gone", "", "net1", ""); ce != nil {
		t.Errorf("DEL without netns: %+v", ce)
	}
	if _, err := os.Stat(e.stateDir + "/attachments"); err == nil {
		if st := e.state(); len(st) != 0 {
			t.Errorf("state created by DEL: %+v", st)
		}
	}
}
