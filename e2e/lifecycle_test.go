package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// 32 pods with two attachments each, all added at once through cnitool:
// no device is ever held twice, and each pod's two attachments differ.
func TestConcurrentPodsNeverShareDevices(t *testing.T) {
	e := newEnv(t)
	e.install(e.conf("fast-net", e.recorder(nil)))
	const pods = 32
	netns := make([]ns.NetNS, pods)
	for i := range pods {
		netns[i] = testenv.NetNS(t)
		e.setPod("default", fmt.Sprintf("p%d", i), fmt.Sprintf("dev-%d-a", i), fmt.Sprintf("dev-%d-b", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*pods)
	for i := range pods {
		for _, ifName := range []string{"net1", "net2"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, errOut, err := e.cnitool("add", "fast-net", netns[i].Path(), ifName, podArgs("default", fmt.Sprintf("p%d", i)), "")
				if err != nil {
					errs <- fmt.Errorf("pod %d %s: %v %s %s", i, ifName, err, out, errOut)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := e.state()
	if len(st) != 2*pods {
		t.Fatalf("%d claims, want %d", len(st), 2*pods)
	}
	holder := map[string]string{}
	for _, a := range st {
		who := a.Pod.Name + "/" + a.IfName
		if prev, dup := holder[a.DeviceID]; dup {
			t.Errorf("device %s held by %s and %s", a.DeviceID, prev, who)
		}
		holder[a.DeviceID] = who
		if _, stdin := e.record("ADD", a.ContainerID, a.IfName); stdin["deviceID"] != a.DeviceID {
			t.Errorf("%s: delegate got %v, claim says %s", who, stdin["deviceID"], a.DeviceID)
		}
	}
}

// The result comes back in the config's CNI version, whatever the delegate's.
func TestResultInConfigVersion(t *testing.T) {
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t)
			pod := testenv.NetNS(t)
			e.setPod("default", "p1", "eth9")
			conf := e.conf("fast-net", e.recorder(map[string]any{"cniVersion": "1.0.0", "ip": "198.51.100.4/24"}))
			conf["cniVersion"] = v
			out, ce := e.run("ADD", mustJSON(t, conf), "c1", pod.Path(), "net1", podArgs("default", "p1"))
			if ce != nil {
				t.Fatalf("ADD: %+v", ce)
			}
			var res struct {
				CNIVersion string           `json:"cniVersion"`
				IPs        []map[string]any `json:"ips"`
			}
			if err := json.Unmarshal(out, &res); err != nil || res.CNIVersion != v || len(res.IPs) != 1 {
				t.Errorf("result %s (%v)", out, err)
			}
			if _, ce := e.run("DEL", mustJSON(t, conf), "c1", pod.Path(), "net1", podArgs("default", "p1")); ce != nil {
				t.Errorf("DEL: %+v", ce)
			}
		})
	}
}

// A new sandbox of the same pod takes over the device of the old one once
// that one is gone.
func TestNewSandboxDropsOlderClaims(t *testing.T) {
	e := newEnv(t)
	old, cur := testenv.NetNS(t), testenv.NetNS(t)
	e.pciPod("p1", "0000:01:02.3")
	e.install(e.conf("fast-net", e.recorder(nil)))
	args := podArgs("default", "p1")
	e.mustCnitool("add", "fast-net", old.Path(), "net1", args, "")
	testenv.RemoveNetNS(t, old)
	e.mustCnitool("add", "fast-net", cur.Path(), "net1", args, "")
	st := e.state()
	if len(st) != 1 || st[0].ContainerID != testenv.CnitoolID(cur.Path()) {
		t.Fatalf("claims %+v", st)
	}
	if _, err := os.Stat(e.cniFile("fast-net", testenv.CnitoolID(old.Path()), "net1")); !os.IsNotExist(err) {
		t.Errorf("old sandbox's CNI file kept: %v", err)
	}
	// Its delegate was told to let go (IPAM, the device) with what its ADD used.
	if _, stdin := e.record("DEL", testenv.CnitoolID(old.Path()), "net1"); stdin["deviceID"] != "0000:01:02.3" {
		t.Errorf("old sandbox's delegate DEL got %v", stdin["deviceID"])
	}
	// The old sandbox's late DEL must not disturb the new one.
	e.mustCnitool("del", "fast-net", old.Path(), "net1", args, "")
	if st := e.state(); len(st) != 1 {
		t.Errorf("claims after old DEL %+v", st)
	}
	if _, err := os.Stat(e.cniFile("fast-net", testenv.CnitoolID(cur.Path()), "net1")); err != nil {
		t.Errorf("new sandbox's CNI file: %v", err)
	}
}

// CHECK fails with a clear error when the CNI file is gone.
func TestCheckDetectsMissingDeviceInfo(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.pciPod("p1", "0000:01:02.3")
	e.install(e.conf("fast-net", e.recorder(nil)))
	args := podArgs("default", "p1")
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", args, "")
	e.mustCnitool("check", "fast-net", pod.Path(), "net1", args, "")
	if _, stdin := e.record("CHECK", testenv.CnitoolID(pod.Path()), "net1"); stdin["prevResult"] == nil {
		t.Error("delegate CHECK got no prevResult")
	}
	if err := os.Remove(e.cniFile("fast-net", testenv.CnitoolID(pod.Path()), "net1")); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := e.cnitool("check", "fast-net", pod.Path(), "net1", args, "")
	if err == nil || !contains(errOut, "device-info") {
		t.Errorf("CHECK with the CNI file gone: %v %s", err, errOut)
	}
	_, errOut, err = e.cnitool("check", "fast-net", pod.Path(), "net9", args, "")
	if err == nil || !contains(errOut, "no completed ADD") {
		t.Errorf("CHECK of an unknown attachment: %v %s", err, errOut)
	}
}

// STATUS needs the kubelet to answer, then asks the delegates.
func TestStatus(t *testing.T) {
	e := newEnv(t)
	e.pr.SetAllocatable(&v1.AllocatableResourcesResponse{})
	conf := e.conf("fast-net", e.recorder(nil))
	conf["cniVersion"] = "1.1.0"
	if _, ce := e.run("STATUS", mustJSON(t, conf), "", "", "", ""); ce != nil {
		t.Fatalf("STATUS: %+v", ce)
	}
	if _, err := os.Stat(filepath.Join(e.recordDir, "STATUS.json")); err != nil {
		t.Errorf("delegate STATUS not run: %v", err)
	}
	conf["podResourcesSocket"] = filepath.Join(e.root, "no-kubelet.sock")
	_, ce := e.run("STATUS", mustJSON(t, conf), "", "", "", "")
	if ce == nil || ce.Code != 50 || !contains(ce.Msg, "does not answer") {
		t.Errorf("STATUS without kubelet: %+v", ce)
	}
}

// GC removes everything of attachments not listed as valid, keeps the rest,
// and runs the delegates' GC.
func TestGC(t *testing.T) {
	e := newEnv(t)
	keep, drop := testenv.NetNS(t), testenv.NetNS(t)
	e.setPod("default", "keep", "0000:01:02.3")
	e.setPod("default", "drop", "0000:01:02.4")
	e.writeDP("0000:01:02.3", pciInfo("0000:01:02.3"))
	e.writeDP("0000:01:02.4", pciInfo("0000:01:02.4"))
	conf := e.conf("fast-net", e.recorder(nil))
	conf["cniVersion"] = "1.1.0"
	e.install(conf)
	e.mustCnitool("add", "fast-net", keep.Path(), "net1", podArgs("default", "keep"), "")
	e.mustCnitool("add", "fast-net", drop.Path(), "net1", podArgs("default", "drop"), "")
	conf["cni.dev/valid-attachments"] = []map[string]string{{"containerID": testenv.CnitoolID(keep.Path()), "ifname": "net1"}}
	corrupt := e.corruptRecord("fast-net", "crashed", "net1")
	if _, ce := e.run("GC", mustJSON(t, conf), "", "", "", ""); ce != nil {
		t.Fatalf("GC: %+v", ce)
	}
	for _, f := range []string{corrupt, e.cniFile("fast-net", "crashed", "net1")} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("GC left %s of a corrupt record: %v", f, err)
		}
	}
	st := e.state()
	if len(st) != 1 || st[0].Pod.Name != "keep" {
		t.Fatalf("claims after GC %+v", st)
	}
	if _, err := os.Stat(e.cniFile("fast-net", testenv.CnitoolID(drop.Path()), "net1")); !os.IsNotExist(err) {
		t.Errorf("dropped attachment's CNI file: %v", err)
	}
	if _, err := os.Stat(e.cniFile("fast-net", testenv.CnitoolID(keep.Path()), "net1")); err != nil {
		t.Errorf("kept attachment's CNI file: %v", err)
	}
	e.record("DEL", testenv.CnitoolID(drop.Path()), "net1")
	if _, err := os.Stat(filepath.Join(e.recordDir, "GC.json")); err != nil {
		t.Errorf("delegate GC not run: %v", err)
	}
}

// GC of one network never touches another's attachments, even when their
// delegates carry the same name.
func TestGCStaysInItsNetwork(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "dev-1", "dev-2")
	a := e.conf("net-a", e.recorder(map[string]any{"name": "shared"}))
	b := e.conf("net-b", e.recorder(map[string]any{"name": "shared"}))
	for _, c := range []map[string]any{a, b} {
		c["cniVersion"] = "1.1.0"
		e.install(c)
	}
	e.mustCnitool("add", "net-a", pod.Path(), "net1", podArgs("default", "p1"), "")
	e.mustCnitool("add", "net-b", pod.Path(), "net2", podArgs("default", "p1"), "")
	if _, ce := e.run("GC", mustJSON(t, a), "", "", "", ""); ce != nil {
		t.Fatalf("GC: %+v", ce)
	}
	st := e.state()
	if len(st) != 1 || st[0].Network != "net-b" {
		t.Fatalf("claims after GC of net-a: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(e.recordDir, "DEL-"+testenv.CnitoolID(pod.Path())+"_net2.json")); !os.IsNotExist(err) {
		t.Errorf("GC of net-a ran DEL on net-b's attachment: %v", err)
	}
}

// After a crash right after the claim (no delegate config recorded yet), DEL
// runs the delegate DEL with the claimed device and frees it, and a retried
// ADD gets the device it had claimed, not the first free one.
func TestCrashAfterClaim(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "dev-1", "dev-2")
	e.install(e.conf("fast-net", e.recorder(nil)))
	cid := e.crashAfterClaim(pod, "dev-2")
	for range 2 {
		e.mustCnitool("del", "fast-net", pod.Path(), "net1", podArgs("default", "p1"), "")
		if _, stdin := e.record("DEL", cid, "net1"); len(e.state()) != 0 || stdin["deviceID"] != "dev-2" {
			t.Errorf("DEL after the crash: delegate got device %v, claims %+v", stdin["deviceID"], e.state())
		}
		e.crashAfterClaim(pod, "dev-2")
	}
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	if _, stdin := e.record("ADD", cid, "net1"); stdin["deviceID"] != "dev-2" {
		t.Errorf("retried ADD got %v, want dev-2", stdin["deviceID"])
	}
	if st := e.state(); len(st) != 1 || !st[0].Complete {
		t.Errorf("state %+v", st)
	}
}
