package dra_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
)

// TestDriverUnderNodesim: nodesim as the kubelet (registration through the plugin
// registration socket, allocation with the scheduler's allocator, NodePrepareResources,
// PodResources) and netdev-dp in DRA mode: a pod whose claim asks for a VF of the shipped
// DeviceClass gets one, with netdev-dp's CDI name in PodResources and its device-info
// file on disk; deleting the pod unprepares the claim and the files go.
func TestDriverUnderNodesim(t *testing.T) {
	n := newDriverNode(t)
	bin := n.startUnderNodesim()
	n.waitDevices("six devices", func(m map[string]resourceapi.Device) bool { return len(m) == 6 })

	claim := n.createClaim("vf-"+n.name, "sriov-vf.example.com")
	pod := "web-" + n.name
	out := simCLI(t, bin, "pod", "add", "--root", n.dir, "--namespace", "default", "--name", pod,
		"--claim", "net=claim:"+claim.Name, "--container", "app=claim:net")
	var alloc kubeletsim.PodAllocation
	e2etest.Must(t, json.Unmarshal([]byte(out), &alloc))
	if len(alloc.Claims) != 1 || len(alloc.Claims[0].Devices) != 1 {
		t.Fatalf("pod add: claims %+v", alloc.Claims)
	}
	dev := alloc.Claims[0].Devices[0]
	if dev.Driver != drvDriver || dev.Pool != n.name || len(devicesCDI(dev.CDIDeviceIDs)) != 1 || !strings.HasPrefix(dev.CDIDeviceIDs[0], drvResVF+"=0000:01:01.") {
		t.Fatalf("prepared device %+v", dev)
	}
	if id := n.deviceIDOf(dev.Device); dev.CDIDeviceIDs[0] != drvResVF+"="+id {
		t.Errorf("CDI name %s, device ID attribute %s", dev.CDIDeviceIDs[0], id)
	}
	n.checkFiles(t, dev.CDIDeviceIDs, true)
	if pods := simCLI(t, bin, "pods", "--root", n.dir); !strings.Contains(pods, dev.CDIDeviceIDs[0]) {
		t.Errorf("PodResources (nodesim pods) lacks the CDI device %s:\n%s", dev.CDIDeviceIDs[0], pods)
	}
	got, err := srv.Client.ResourceV1().ResourceClaims("default").Get(e2etest.Ctx(t), claim.Name, metav1.GetOptions{})
	e2etest.Must(t, err)
	if got.Status.Allocation == nil || !slices.ContainsFunc(got.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.Name == pod }) {
		t.Errorf("claim status %+v", got.Status)
	}

	simCLI(t, bin, "pod", "del", "--root", n.dir, "--namespace", "default", "--name", pod)
	n.checkFiles(t, dev.CDIDeviceIDs, false)
}

// startUnderNodesim starts nodesim as the node's kubelet (until the test ends), then the
// driver, and waits until nodesim has registered it; it returns the nodesim binary.
func (n *driverNode) startUnderNodesim() string {
	n.t.Helper()
	bin := n.startNodesim()
	n.start()
	simCLI(n.t, bin, "wait", "--root", n.dir, "--driver", drvDriver)
	return bin
}
