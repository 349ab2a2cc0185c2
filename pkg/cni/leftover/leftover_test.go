package leftover

import (
	"path/filepath"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
)

func TestDeviceGone(t *testing.T) {
	pod := attachment.Pod{Namespace: "ns", Name: "p"}
	dp := &attachment.Record{Pod: pod, ResourceName: "a.com/a", DeviceID: "1"}
	injected := &attachment.Record{Pod: pod, DeviceID: "1"} // Multus's runtimeConfig.deviceID: no resource
	dra := &attachment.Record{Pod: pod, ResourceName: "a.com/a", DeviceID: "1", Claim: &attachment.ClaimDevice{Name: "c"}}
	for _, c := range []struct {
		name     string
		rec      *attachment.Record
		podFound bool
		devices  []string
		want     bool
	}{
		{"device still the pod's", dp, true, []string{"0", "1"}, false},
		{"device no longer the pod's", dp, true, []string{"0"}, true},
		{"pod gone", dp, false, nil, true},
		{"DRA device, pod listed without it", dra, true, nil, false},
		{"DRA device, pod gone", dra, false, nil, true},
		{"unknown pod", &attachment.Record{ResourceName: "a.com/a", DeviceID: "1"}, false, nil, false},
		{"injected device, pod gone", injected, false, nil, true},
		{"injected device still one of the pod's", injected, true, PodDevices(injected, map[string][]string{"a.com/a": {"0"}, "b.com/b": {"1"}}), false},
		{"injected device no longer the pod's", injected, true, PodDevices(injected, map[string][]string{"a.com/a": {"0"}}), true},
		{"device of a resource, another resource's ID", dp, true, PodDevices(dp, map[string][]string{"b.com/b": {"1"}}), true},
	} {
		if got := DeviceGone(c.rec, c.podFound, c.devices); got != c.want {
			t.Errorf("%s: DeviceGone %v, want %v", c.name, got, c.want)
		}
	}
}

func TestNetnsAndRecordedDelegate(t *testing.T) {
	dir := t.TempDir()
	if NetnsGone(dir) || ExistingNetns(dir) != dir {
		t.Errorf("an existing path counts as gone")
	}
	missing := filepath.Join(dir, "gone")
	if !NetnsGone(missing) || !NetnsGone("") || ExistingNetns(missing) != "" {
		t.Errorf("a missing or unrecorded netns counts as there")
	}
	rec := &attachment.Record{Key: attachment.Key{Network: "n", ContainerID: "c", IfName: "net1"}, NetNS: missing,
		Delegate: []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"host-device"}]}`), CNIArgs: [][2]string{{"K", "V"}}}
	list, rt, err := RecordedDelegate(rec)
	if err != nil || list == nil || list.Plugins[0].Network.Type != "host-device" || rt.NetNS != "" || rt.ContainerID != "c" || rt.Args[0][1] != "V" {
		t.Errorf("RecordedDelegate: %+v %+v %v", list, rt, err)
	}
	if list, _, err := RecordedDelegate(&attachment.Record{}); list != nil || err != nil {
		t.Errorf("a record without delegates: %+v %v", list, err)
	}
}
