package kubeapi_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// The devplumb binary against the real API server: it finds its resourceName on the NAD,
// its device through PodResources, moves it with host-device, writes its network-status
// entry next to an existing one, and removes only its own on DEL.
func TestDevplumbBinaryNetworkStatus(t *testing.T) {
	n := newNode(t)
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "dp-binary", nodeName, annotationWith(t, otherEntry))
	if err != nil {
		t.Fatal(err)
	}
	n.givePod(pod.Name)
	netns := testenv.NetNS(t).Path()
	args := n.podArgs(pod.Name, string(pod.UID))

	res := n.devplumb(t, "ADD", n.conf(nil), netns, args)
	if res.Code != 0 {
		t.Fatalf("ADD: %+v", res)
	}
	got := e2etest.NetworkStatus(t, srv.Client, "default", pod.Name)
	if len(got) != 2 || !reflect.DeepEqual(got[0], otherEntry) {
		t.Fatalf("network-status %+v: want the existing entry kept first, then devplumb's", got)
	}
	mine := got[1]
	// The config takes its resourceName from the NAD: the entry is named after it, as
	// Multus names it.
	if mine.Name != "default/"+n.network || mine.Interface != "net1" || !reflect.DeepEqual(mine.DeviceInfo, n.info) {
		t.Fatalf("devplumb's entry %+v (device-info %+v), want default/%s/net1 with %+v", mine, mine.DeviceInfo, n.network, n.info)
	}
	if len(mine.IPs) != 1 || mine.IPs[0] != "192.0.2.10" {
		t.Errorf("entry IPs %v, want the delegate's 192.0.2.10", mine.IPs)
	}

	if res := n.devplumb(t, "DEL", n.conf(nil), netns, args); res.Code != 0 {
		t.Fatalf("DEL: %+v", res)
	}
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, "default", pod.Name), otherEntry)
	if _, err := netlink.LinkByName(n.dev); err != nil {
		t.Fatalf("device not back on the host after DEL: %v", err)
	}

	// The pod object is deleted before the runtime's DEL: DEL still succeeds.
	if res := n.devplumb(t, "ADD", n.conf(nil), netns, args); res.Code != 0 {
		t.Fatalf("second ADD: %+v", res)
	}
	e2etest.Must(t, srv.DeletePod(e2etest.Ctx(t), "default", pod.Name))
	if res := n.devplumb(t, "DEL", n.conf(nil), netns, args); res.Code != 0 {
		t.Fatalf("DEL after the pod object is gone: %+v", res)
	}
	if _, err := netlink.LinkByName(n.dev); err != nil {
		t.Fatalf("device not back on the host after DEL: %v", err)
	}
}

// With the API server down, ADD fails under "required" (the default) with an error that
// says so, within devplumb's bound, and succeeds under "best-effort"; DEL succeeds.
func TestDevplumbBinaryAPIServerDown(t *testing.T) {
	n := newNode(t)
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "dp-down", nodeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.givePod(pod.Name)
	// resourceName in the config: the NAD cannot be read while the server is down.
	conf := n.conf(map[string]any{"resourceName": resourceName})
	srv.StopAPIServer()
	t.Cleanup(func() {
		if err := srv.StartAPIServer(); err != nil {
			t.Fatalf("restart API server: %v", err)
		}
	})
	netns := testenv.NetNS(t).Path()
	args := n.podArgs(pod.Name, string(pod.UID))

	start := time.Now()
	res := n.devplumb(t, "ADD", conf, netns, args)
	took := time.Since(start)
	if res.Code != 106 || !strings.Contains(res.Msg+res.Details, "unreachable") {
		t.Fatalf("required ADD with the API server down: %+v, want code 106 saying unreachable", res)
	}
	if bound := 10 * time.Second; took > bound+slack {
		t.Errorf("ADD took %s, devplumb's bound is %s", took, bound)
	}
	if _, err := netlink.LinkByName(n.dev); err != nil {
		t.Errorf("failed ADD left the device in the pod: %v", err)
	}
	t.Logf("required: %s (%s)", res.Details, took)

	conf["networkStatus"] = "best-effort"
	start = time.Now()
	if res := n.devplumb(t, "ADD", conf, netns, args); res.Code != 0 {
		t.Fatalf("best-effort ADD with the API server down: %+v", res)
	}
	if took, bound := time.Since(start), 10*time.Second; took > bound+slack {
		t.Errorf("best-effort ADD took %s, devplumb's bound is %s", took, bound)
	}
	delete(conf, "networkStatus") // DEL succeeds even under "required"
	start = time.Now()
	if res := n.devplumb(t, "DEL", conf, netns, args); res.Code != 0 {
		t.Fatalf("DEL with the API server down: %+v", res)
	}
	if took, bound := time.Since(start), 10*time.Second; took > bound+slack {
		t.Errorf("DEL took %s, devplumb's bound is %s", took, bound)
	}
	if _, err := netlink.LinkByName(n.dev); err != nil {
		t.Errorf("device not back on the host after DEL: %v", err)
	}
}

const resourceName = "example.com/hostdev"

// node is one test's devplumb setup: binaries, a PodResources server, device-info dir,
// a veth end as the device, and a NAD naming the resource.
type node struct {
	t       *testing.T
	dir     string
	bin     string
	network string
	dev     string
	info    *nadv1.DeviceInfo
	pr      *podresourcestest.Server
}

func newNode(t *testing.T) *node {
	t.Helper()
	testenv.CNIPlugins(t)
	n := &node{t: t, dir: t.TempDir(), bin: testenv.Build(t, "./cmd/devplumb"), pr: podresourcestest.NewServer(t)}
	stem := testenv.VethPair(t, "dpk")
	n.dev = stem + "a"
	n.network = "net-" + strings.TrimPrefix(stem, "dpk")
	n.info = &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypePCI, Version: nadv1.DeviceInfoVersion,
		Pci: &nadv1.PciDevice{PciAddress: "0000:3b:02.1", PfPciAddress: "0000:3b:00.0"}}
	dp := filepath.Join(n.dir, "devinfo", "dp")
	e2etest.Must(t, os.MkdirAll(dp, 0o755))
	raw, _ := json.Marshal(n.info)
	e2etest.Must(t, os.WriteFile(filepath.Join(dp, "example.com-hostdev-"+n.dev+"-device.json"), raw, 0o644))
	e2etest.Must(t, srv.InstallNADCRD(e2etest.Ctx(t)))
	_, err := srv.CreateNAD(e2etest.Ctx(t), "default", n.network, `{"cniVersion":"1.0.0","name":"`+n.network+`","type":"devplumb"}`,
		map[string]string{kube.ResourceNameAnnot: resourceName})
	e2etest.Must(t, err)
	return n
}

func (n *node) givePod(name string) {
	n.pr.SetPod(&v1.PodResources{Namespace: "default", Name: name, Containers: []*v1.ContainerResources{{
		Name: "c", Devices: []*v1.ContainerDevices{{ResourceName: resourceName, DeviceIds: []string{n.dev}}},
	}}})
}

func (n *node) conf(extra map[string]any) map[string]any {
	return e2etest.HostDeviceConf(n.network, n.pr.Socket, n.dir, srv.Kubeconfig, extra)
}

// netConf is conf without the node config's keys: the network config an
// agent given conf's node config (nodeconfigtest.Split) is sent.
func (n *node) netConf(extra map[string]any) map[string]any {
	net, _ := nodeconfigtest.SplitMap(n.conf(extra))
	return net
}

func (n *node) podArgs(pod, uid string) string {
	return "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + pod + ";K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID=" + uid
}

// devplumb runs the binary as a container runtime would.
func (n *node) devplumb(t *testing.T, cmd string, conf map[string]any, netns, args string) e2etest.CNIResult {
	t.Helper()
	return e2etest.RunDevplumb(t, n.bin, e2etest.CNICall{Command: cmd, ContainerID: "c1", NetNS: netns, IfName: "net1", Args: args, Conf: conf})
}
