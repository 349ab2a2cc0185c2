package e2e

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// A claim whose pod the kubelet forgot (its DEL never came) does not block
// the pod the kubelet gave the device to next; CHECK notices when the
// kubelet takes a device away.
func TestStaleClaimTakenOverAndCheckedAgainstKubelet(t *testing.T) {
	e := newEnv(t)
	oldPod, newPod := testenv.NetNS(t), testenv.NetNS(t)
	e.takeOver(oldPod, newPod)
	st := e.state()
	if len(st) != 1 || st[0].Pod.Name != "new" {
		t.Fatalf("claims %+v", st)
	}
	if _, err := os.Stat(e.cniFile("fast-net", testenv.CnitoolID(oldPod.Path()), "net1")); !os.IsNotExist(err) {
		t.Errorf("stale CNI file kept: %v", err)
	}
	e.mustCnitool("check", "fast-net", newPod.Path(), "net1", podArgs("default", "new"), "")
	e.setPod("default", "new", "0000:01:02.4")
	_, errOut, err := e.cnitool("check", "fast-net", newPod.Path(), "net1", podArgs("default", "new"), "")
	if err == nil || !contains(errOut, "no longer assigns") {
		t.Errorf("CHECK after the kubelet moved the device: %v %s", err, errOut)
	}
}

// takeOver attaches pod "old" (device 0000:01:02.3) in oldPod; then the kubelet forgets
// it (its DEL never comes) and gives the device to pod "new", attached in newPod.
func (e *env) takeOver(oldPod, newPod ns.NetNS) {
	e.t.Helper()
	e.pciPod("old", "0000:01:02.3")
	e.install(e.conf("fast-net", e.recorder(nil)))
	e.mustCnitool("add", "fast-net", oldPod.Path(), "net1", podArgs("default", "old"), "")
	e.pr.DeletePod("default", "old")
	e.setPod("default", "new", "0000:01:02.3")
	e.mustCnitool("add", "fast-net", newPod.Path(), "net1", podArgs("default", "new"), "")
}

// A live holder keeps its device: the kubelet still lists it for that pod.
func TestLiveClaimIsKept(t *testing.T) {
	e := newEnv(t)
	a, b := testenv.NetNS(t), testenv.NetNS(t)
	e.setPod("default", "a", "dev-1")
	e.setPod("default", "b", "dev-1") // a kubelet bug: the same device twice
	e.install(e.conf("fast-net", e.recorder(nil)))
	e.mustCnitool("add", "fast-net", a.Path(), "net1", podArgs("default", "a"), "")
	_, errOut, err := e.cnitool("add", "fast-net", b.Path(), "net1", podArgs("default", "b"), "")
	if err == nil || !contains(errOut, "held by pod default/a") {
		t.Errorf("second pod on a held device: %v %s", err, errOut)
	}
}

// The kubelet is asked about another pod's holder of a candidate only when
// that holder stands before every free candidate: an ADD whose device is free
// asks about its own pod alone (and reads the records once); one whose first
// candidate is held asks about the holder, which keeps its device while the
// kubelet lists it for its pod.
func TestHolderAskedAboutOnlyBeforeAFreeDevice(t *testing.T) {
	e := newEnv(t)
	holder, first, second := testenv.NetNS(t), testenv.NetNS(t), testenv.NetNS(t)
	e.install(e.conf("fast-net", e.recorder(nil)))
	e.setPod("default", "holder", "dev-1")
	e.mustCnitool("add", "fast-net", holder.Path(), "net1", podArgs("default", "holder"), "")
	e.setPod("default", "free-first", "dev-2", "dev-1") // a kubelet bug: dev-1 twice
	before := e.pr.Calls("Get")
	e.mustCnitool("add", "fast-net", first.Path(), "net1", podArgs("default", "free-first"), "")
	if got := e.pr.Calls("Get") - before; got != 1 {
		t.Errorf("ADD whose first candidate is free made %d PodResources Gets, want 1 (its own pod's)", got)
	}
	e.setPod("default", "held-first", "dev-1", "dev-3")
	before = e.pr.Calls("Get")
	e.mustCnitool("add", "fast-net", second.Path(), "net1", podArgs("default", "held-first"), "")
	if got := e.pr.Calls("Get") - before; got != 2 {
		t.Errorf("ADD whose first candidate is held made %d PodResources Gets, want 2 (its pod's, the holder's)", got)
	}
	devices := map[string]string{}
	for _, r := range e.state() {
		devices[r.Pod.Name] = r.DeviceID
	}
	if devices["holder"] != "dev-1" || devices["free-first"] != "dev-2" || devices["held-first"] != "dev-3" {
		t.Errorf("devices taken %v, want holder dev-1, free-first dev-2, held-first dev-3", devices)
	}
}

// Multus injects the device as a top-level deviceID; VERSION lists versions.
func TestTopLevelDeviceIDAndVersion(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	conf := e.conf("fast-net", e.recorder(nil))
	delete(conf, "resourceName")
	conf["deviceID"] = "0000:3b:00.2"
	if _, ce := e.run("ADD", mustJSON(t, conf), "c1", pod.Path(), "net1", "IgnoreUnknown=1"); ce != nil {
		t.Fatalf("ADD: %+v", ce)
	}
	_, stdin := e.record("ADD", "c1", "net1")
	if stdin["deviceID"] != "0000:3b:00.2" || stdin["pciBusID"] != "0000:3b:00.2" {
		t.Errorf("delegate got %v", stdin)
	}
	out, ce := e.run("VERSION", []byte(`{"cniVersion":"1.0.0"}`), "", "", "", "")
	var v struct {
		Supported []string `json:"supportedVersions"`
	}
	if ce != nil || json.Unmarshal(out, &v) != nil || len(v.Supported) != 5 || v.Supported[0] != "0.3.0" {
		t.Errorf("VERSION %s %+v", out, ce)
	}
}

// The binary's Kubernetes wiring: an unusable kubeconfig fails ADD under
// "required" (leaving nothing) and is only logged under "best-effort".
func TestKubeconfigRequiredVersusBestEffort(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "dev-1")
	conf := e.conf("fast-net", e.recorder(nil))
	conf["kubeconfig"] = e.root + "/missing.kubeconfig"
	_, ce := e.run("ADD", mustJSON(t, conf), "c1", pod.Path(), "net1", podArgs("default", "p1"))
	if ce == nil || ce.Code != 106 || !contains(ce.Details, "missing.kubeconfig") {
		t.Fatalf("required: %+v", ce)
	}
	e.assertNothingWritten(t)
	conf["networkStatus"] = "best-effort"
	if _, ce := e.run("ADD", mustJSON(t, conf), "c1", pod.Path(), "net1", podArgs("default", "p1")); ce != nil {
		t.Fatalf("best-effort: %+v", ce)
	}
	if _, ce := e.run("DEL", mustJSON(t, conf), "c1", pod.Path(), "net1", podArgs("default", "p1")); ce != nil {
		t.Fatalf("DEL never fails on the API server: %+v", ce)
	}
}
