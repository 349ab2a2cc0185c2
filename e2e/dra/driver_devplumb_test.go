package dra_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

const drvResHostdev = "example.com/hostdev"

// TestDriverNodesimDevplumb is the whole DRA path on one node with no mock: netdev-dp in
// DRA mode publishes a veth pair as example.com/hostdev; nodesim, as the kubelet, allocates
// a pod's claim of the shipped DeviceClass hostdev.example.com and has netdev-dp prepare
// it; devplumb, with the NAD-style config `resourceName: example.com/hostdev` that serves
// device-plugin pods too, finds the device through PodResources (the local path), and its
// delegate host-device moves that veth end into the pod's network namespace;
// network-status and the claim's status.devices[] both carry the result; DEL brings the
// veth back and clears both; pod deletion unprepares the claim.
func TestDriverNodesimDevplumb(t *testing.T) {
	veth := testenv.VethPair(t, "drv") + "a"
	n := newDriverNode(t, resources.Resource{ResourceName: drvResHostdev, NetDevs: &link.Config{Names: []string{veth}}})
	testenv.CNIPlugins(t)
	nodesim := n.startUnderNodesim()
	n.waitDevices("the veth published", func(m map[string]resourceapi.Device) bool { _, ok := m[veth]; return ok })

	claim := n.createClaim("hd-"+n.name, "hostdev.example.com")
	podName := "hd-" + n.name
	out := simCLI(t, nodesim, "pod", "add", "--root", n.dir, "--namespace", cniNS, "--name", podName,
		"--claim", "net=claim:"+claim.Name, "--container", "app=claim:net")
	var alloc kubeletsim.PodAllocation
	e2etest.Must(t, json.Unmarshal([]byte(out), &alloc))
	if len(alloc.Claims) != 1 || len(alloc.Claims[0].Devices) != 1 || alloc.Claims[0].Devices[0].Device != veth {
		t.Fatalf("pod add: claims %+v, want the veth %s", alloc.Claims, veth)
	}
	pod, err := srv.Client.CoreV1().Pods(cniNS).Get(e2etest.Ctx(t), podName, metav1.GetOptions{})
	e2etest.Must(t, err)

	// devplumb as the cni tests run it, asking nodesim's PodResources (only its socket
	// path is taken from the podresourcestest type: nodesim serves it).
	cn := &cniNode{t: t, dir: n.dir, bin: testenv.Build(t, "./cmd/devplumb"), name: n.name, driver: drvDriver,
		network: "hd-net-" + cniRandom(), pr: &podresourcestest.Server{Socket: filepath.Join(n.dir, "pod-resources", "kubelet.sock")}}
	conf := cn.conf(map[string]any{"resourceName": drvResHostdev, "deviceInfoDir": n.devinfoDir})
	netns := testenv.NetNS(t).Path()
	if res := cn.run("ADD", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("ADD: %+v", res)
	}
	if onHost(veth) {
		t.Errorf("ADD left %s on the host: the delegate did not get it", veth)
	}
	if st := deviceStatus(t, claim.Name, drvDriver, veth); st == nil || st.NetworkData == nil || st.NetworkData.InterfaceName != "net1" {
		t.Errorf("claim status.devices entry after ADD: %+v", st)
	}
	if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, podName); len(ns) != 1 || ns[0].Interface != "net1" {
		t.Errorf("network-status after ADD: %+v", ns)
	}

	if res := cn.run("DEL", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("DEL: %+v", res)
	}
	if !onHost(veth) {
		t.Errorf("DEL did not bring %s back", veth)
	}
	if st := deviceStatus(t, claim.Name, drvDriver, veth); st != nil {
		t.Errorf("claim status.devices entry after DEL: %+v", st)
	}
	if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, podName); len(ns) != 0 {
		t.Errorf("network-status after DEL: %+v", ns)
	}
	simCLI(t, nodesim, "pod", "del", "--root", n.dir, "--namespace", cniNS, "--name", podName)
	n.checkFiles(t, alloc.Claims[0].Devices[0].CDIDeviceIDs, false)
}
