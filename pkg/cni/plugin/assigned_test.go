package plugin

import (
	"strings"
	"testing"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// An injected device ID (Multus's runtimeConfig.deviceID) that the kubelet
// gave another pod is refused, naming the pod, the ID and the resource, and
// nothing is recorded; the pod's own device is taken.
func TestInjectedDeviceOfAnotherPodIsRefused(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	e.pr.SetPod(&v1.PodResources{Namespace: "default", Name: "other", Containers: []*v1.ContainerResources{{
		Name: "app", Devices: []*v1.ContainerDevices{{ResourceName: "example.com/vf", DeviceIds: []string{"0000:01:00.7"}}},
	}}})
	inject := func(id string) func(map[string]any) {
		return func(c map[string]any) {
			c["runtimeConfig"] = map[string]any{"deviceID": id}
		}
	}
	_, err := captureStdout(t, func() error { return e.p.Add(e.argsFor("fast-net", "net1", inject("0000:01:00.7"))) })
	te := wantCode(t, "ADD of another pod's device", err, ErrNoDevice)
	for _, want := range []string{"default/p1", "0000:01:00.7", "example.com/vf", "runtimeConfig.deviceID"} {
		if !strings.Contains(te.Msg, want) {
			t.Errorf("error %q does not name %s", te.Msg, want)
		}
	}
	if st := e.state(); len(st) != 0 || len(e.del.called()) != 0 {
		t.Fatalf("refused ADD left records %+v or ran delegates %v", st, e.del.called())
	}
	if _, err := captureStdout(t, func() error { return e.p.Add(e.argsFor("fast-net", "net1", inject("0000:01:00.1"))) }); err != nil {
		t.Fatalf("ADD of the pod's own injected device: %v", err)
	}
}

// An injected ID with no resource named is checked against every resource
// of the pod; "trustDeviceID" takes it unchecked, even with no kubelet.
func TestInjectedDeviceCheckedOrTrusted(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	noResource := func(id string, extra map[string]any) func(map[string]any) {
		return func(c map[string]any) {
			delete(c, "resourceName")
			c["runtimeConfig"] = map[string]any{"deviceID": id}
			for k, v := range extra {
				c[k] = v
			}
		}
	}
	_, err := captureStdout(t, func() error { return e.p.Add(e.argsFor("a", "net1", noResource("0000:01:00.9", nil))) })
	if te := wantCode(t, "ADD of an unassigned device", err, ErrNoDevice); !strings.Contains(te.Msg, "any resource") {
		t.Errorf("error %q does not say every resource was searched", te.Msg)
	}
	_, err = captureStdout(t, func() error {
		return e.p.Add(e.argsFor("b", "net2", noResource("0000:01:00.1", map[string]any{"podResourcesSocket": e.root + "/none.sock"})))
	})
	if te := wantCode(t, "ADD with no kubelet", err, ErrPodResources); !strings.Contains(te.Msg, `"trustDeviceID": true`) {
		t.Errorf("error %q does not say how to trust the caller", te.Msg)
	}
	_, err = captureStdout(t, func() error {
		return e.p.Add(e.argsFor("c", "net3", noResource("0000:01:00.9", map[string]any{"trustDeviceID": true,
			"podResourcesSocket": e.root + "/none.sock"})))
	})
	if err != nil {
		t.Fatalf("trusted ADD: %v", err)
	}
	if st := e.state(); len(st) != 1 || st[0].DeviceID != "0000:01:00.9" {
		t.Fatalf("records %+v, want the trusted device's", st)
	}
}

// A DRA device Multus injects (its deviceID, by the CDI rule) is the pod's
// when the kubelet reports it in the pod's dynamic_resources, with or without
// a resourceName; an ID of no claim of the pod is refused.
func TestInjectedDRADeviceIsChecked(t *testing.T) {
	for _, res := range []string{"example.com/vf", ""} {
		k, _ := draEnv(t, "example.com/vf=0000:01:02.5")
		if res == "" {
			delete(k.conf, "resourceName")
		}
		k.conf["runtimeConfig"] = map[string]any{"deviceID": "0000:01:02.6"}
		wantCode(t, "ADD of a device of no claim of the pod", k.p.Add(k.args()), ErrNoDevice)
		k.conf["runtimeConfig"] = map[string]any{"deviceID": "0000:01:02.5"}
		if err := k.p.Add(k.args()); err != nil {
			t.Fatalf("resourceName %q: ADD of the pod's injected DRA device: %v", res, err)
		}
	}
}
