package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// The delegate gets the device in each injectDeviceID key and pciBusID, and
// in runtimeConfig only for the capabilities it declares (libcni semantics);
// the CNI file it is pointed to already holds the DP file's content.
func TestDelegateReceivesDeviceAndDeviceInfo(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.pciPod("p1", "0000:01:02.3")
	conf := e.conf("fast-net", e.recorder(map[string]any{
		"capabilities": map[string]bool{"deviceID": true, "CNIDeviceInfoFile": true}}))
	conf["injectDeviceID"] = []string{"deviceID", "device"}
	e.install(conf)
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", podArgs("default", "p1"), "")

	cid := testenv.CnitoolID(pod.Path())
	rec, stdin := e.record("ADD", cid, "net1")
	for _, k := range []string{"deviceID", "device", "pciBusID"} {
		if stdin[k] != "0000:01:02.3" {
			t.Errorf("delegate %s = %v", k, stdin[k])
		}
	}
	if stdin["name"] != "fast-net" || stdin["cniVersion"] != "1.0.0" {
		t.Errorf("delegate did not inherit name/cniVersion: %v %v", stdin["name"], stdin["cniVersion"])
	}
	rc, _ := stdin["runtimeConfig"].(map[string]any)
	if len(rc) != 2 || rc["deviceID"] != "0000:01:02.3" || rc["CNIDeviceInfoFile"] != e.cniFile("fast-net", cid, "net1") {
		t.Errorf("runtimeConfig: %v", rc)
	}
	dp, _ := os.ReadFile(filepath.Join(e.devinfoDir, "dp", "example.com-netdev-0000:01:02.3-device.json"))
	if rec.DeviceInfoFile == nil || *rec.DeviceInfoFile != string(dp) {
		t.Errorf("CNI file seen by the delegate %v, want DP file %s", rec.DeviceInfoFile, dp)
	}
	if !contains(rec.Env["CNI_ARGS"], "K8S_POD_NAME=p1") || !contains(rec.Env["CNI_ARGS"], "IgnoreUnknown=1") {
		t.Errorf("CNI_ARGS not passed on: %q", rec.Env["CNI_ARGS"])
	}
	e.mustCnitool("del", "fast-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	delRec, delStdin := e.record("DEL", cid, "net1")
	if delStdin["deviceID"] != "0000:01:02.3" || delRec.DeviceInfoFile == nil {
		t.Errorf("DEL must see what ADD saw: deviceID %v, CNI file %v", delStdin["deviceID"], delRec.DeviceInfoFile)
	}
}

// Without declared capabilities the delegate gets no runtimeConfig; a
// non-PCI device gets no pciBusID.
func TestDelegateWithoutCapabilities(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "eth5")
	e.install(e.conf("fast-net", e.recorder(nil)))
	// A stale file at the attachment's name (a crash) must not survive ADD.
	stale := e.cniFile("fast-net", testenv.CnitoolID(pod.Path()), "net1")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:09:00.0"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	_, stdin := e.record("ADD", testenv.CnitoolID(pod.Path()), "net1")
	if stdin["deviceID"] != "eth5" || stdin["pciBusID"] != nil || stdin["runtimeConfig"] != nil {
		t.Errorf("delegate got %v", stdin)
	}
	if _, err := os.Stat(e.cniFile("fast-net", testenv.CnitoolID(pod.Path()), "net1")); !os.IsNotExist(err) {
		t.Errorf("no DP file, so no CNI file: %v", err)
	}
}

// Multus style: the runtime passes deviceID and CNIDeviceInfoFile through
// capabilities (CAP_ARGS); the kubelet is not asked.
func TestDeviceFromCapabilityArgs(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.writeDP("0000:05:00.1", pciInfo("0000:05:00.1"))
	conf := e.conf("fast-net", e.recorder(map[string]any{
		"capabilities": map[string]bool{"deviceID": true, "CNIDeviceInfoFile": true}}))
	conf["capabilities"] = map[string]bool{"deviceID": true, "CNIDeviceInfoFile": true}
	conf["trustDeviceID"] = true // the kubelet knows no such pod: the caller is trusted
	e.install(conf)
	custom := filepath.Join(e.devinfoDir, "cni", "multus-chosen-name")
	caps := string(mustJSON(t, map[string]string{"deviceID": "0000:05:00.1", "CNIDeviceInfoFile": custom}))
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", podArgs("default", "nokubelet"), caps)
	rec, stdin := e.record("ADD", testenv.CnitoolID(pod.Path()), "net1")
	rc, _ := stdin["runtimeConfig"].(map[string]any)
	if stdin["deviceID"] != "0000:05:00.1" || rc["deviceID"] != "0000:05:00.1" || rc["CNIDeviceInfoFile"] != custom {
		t.Errorf("delegate got %v", stdin)
	}
	if rec.DeviceInfoFile == nil || !contains(*rec.DeviceInfoFile, "0000:05:00.1") {
		t.Errorf("CNI file at the caller's path: %v", rec.DeviceInfoFile)
	}
	e.mustCnitool("del", "fast-net", pod.Path(), "net1", podArgs("default", "nokubelet"), caps)
	if _, err := os.Stat(custom); !os.IsNotExist(err) {
		t.Errorf("caller's CNI file left after DEL: %v", err)
	}
}

// A delegate that updates the CNI file: network-status shows its version.
func TestDelegateUpdatesDeviceInfo(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.pciPod("p1", "0000:01:02.3")
	updated := map[string]any{"type": "pci", "version": "1.1.0",
		"pci": map[string]string{"pci-address": "0000:01:02.3", "rdma-device": "mlx5_3"}}
	e.install(e.conf("fast-net", e.recorder(map[string]any{"writeDeviceInfo": updated,
		"capabilities": map[string]bool{"CNIDeviceInfoFile": true}, "ip": "192.0.2.7/24"})))
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	st := e.state()
	if len(st) != 1 || st[0].NetworkStatus == nil || st[0].NetworkStatus.DeviceInfo == nil {
		t.Fatalf("state %+v", st)
	}
	ns := st[0].NetworkStatus
	if ns.DeviceInfo.Pci.RdmaDevice != "mlx5_3" || len(ns.IPs) != 1 || ns.IPs[0] != "192.0.2.7" {
		got, _ := json.Marshal(ns)
		t.Errorf("network-status %s", got)
	}
}
