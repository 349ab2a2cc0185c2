package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// A veth end handed out as the pod's device is moved into the pod by
// host-device, with its device-info copied, recorded and cleaned on DEL.
func TestHostDeviceAddCheckDel(t *testing.T) {
	e := newEnv(t)
	dev, pod, _, args := e.hostDevicePod("0000:01:02.3")

	out := e.mustCnitool("add", "fast-net", pod.Path(), "net1", args, "")
	var res struct {
		CNIVersion string `json:"cniVersion"`
		Interfaces []struct{ Name, Sandbox string }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("result %q: %v", out, err)
	}
	if res.CNIVersion != "1.0.0" || len(res.Interfaces) == 0 || res.Interfaces[0].Name != "net1" {
		t.Errorf("result: %s", out)
	}
	if !linkIn(t, pod, "net1") || hostLink(dev) {
		t.Fatal("dpa0 was not moved into the pod as net1")
	}
	cid := testenv.CnitoolID(pod.Path())
	dp, _ := os.ReadFile(e.devinfoDir + "/dp/example.com-netdev-" + dev + "-device.json")
	cni, err := os.ReadFile(e.cniFile("fast-net", cid, "net1"))
	if err != nil || string(cni) != string(dp) || len(dp) == 0 {
		t.Fatalf("CNI file %q (%v) is not the DP file %q", cni, err, dp)
	}
	st := e.state()
	if len(st) != 1 || !st[0].Complete || st[0].DeviceID != dev || st[0].Pod.Name != "p1" {
		t.Fatalf("state: %+v", st)
	}
	ns := st[0].NetworkStatus
	if ns == nil || ns.Name != "fast-net" || ns.Interface != "net1" || ns.Mac == "" ||
		ns.DeviceInfo == nil || ns.DeviceInfo.Pci.PciAddress != "0000:01:02.3" {
		t.Fatalf("network-status entry: %+v", ns)
	}

	e.mustCnitool("check", "fast-net", pod.Path(), "net1", args, "")

	e.mustCnitool("del", "fast-net", pod.Path(), "net1", args, "")
	if linkIn(t, pod, "net1") || !hostLink(dev) {
		t.Fatal("DEL did not move the device back")
	}
	if _, err := os.Stat(e.cniFile("fast-net", cid, "net1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CNI file left after DEL: %v", err)
	}
	if st := e.state(); len(st) != 0 {
		t.Errorf("claims left after DEL: %+v", st)
	}
	e.mustCnitool("del", "fast-net", pod.Path(), "net1", args, "")
}

// DEL after the sandbox's netns is gone still cleans devplumb's side.
func TestDelAfterNetnsGone(t *testing.T) {
	e := newEnv(t)
	_, pod, conf, args := e.hostDevicePod("0000:01:02.5")
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", args, "")
	path, cid := pod.Path(), testenv.CnitoolID(pod.Path())
	testenv.RemoveNetNS(t, pod)
	if _, ce := e.run("DEL", mustJSON(t, conf), cid, path, "net1", args); ce != nil {
		t.Fatalf("DEL with the netns gone: %+v", ce)
	}
	if st := e.state(); len(st) != 0 {
		t.Errorf("claims left: %+v", st)
	}
	if _, err := os.Stat(e.cniFile("fast-net", cid, "net1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CNI file left: %v", err)
	}
}
