package dradevice_test

import (
	"reflect"
	"testing"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/cni/dradevice"
	"github.com/devplumb/devplumb/podresources"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

const (
	vf     = "example.com/vf"
	driver = "netdev.devplumb.io"
)

// The kubelet's answer, served by a PodResources server and read with the
// client devplumb uses: a DRA device of resource R is found by its CDI
// device R=<ID>, in the kubelet's order, each allocated device once.
func TestLocalCDIRule(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	srv.SetPod(&v1.PodResources{Namespace: "ns", Name: "p", Containers: []*v1.ContainerResources{
		{Name: "a", DynamicResources: []*v1.DynamicResource{
			podresourcestest.Claim("ns", "p-net-x1", podresourcestest.Device(driver, "node1", "vf-1", "example.com/vf=0000:3b:02.1"),
				// Another resource's CDI device only: not a device of vf.
				podresourcestest.Device(driver, "node1", "gpu-0", "example.com/gpu=0")),
			podresourcestest.Claim("ns", "other", podresourcestest.Device("gpu.example.com", "node1", "g", "gpu.example.com/gpu=g")),
		}},
		// The same claim in a second container: reported once.
		{Name: "b", DynamicResources: []*v1.DynamicResource{
			podresourcestest.Claim("ns", "p-net-x1", podresourcestest.Device(driver, "node1", "vf-1", "example.com/vf=0000:3b:02.1")),
			podresourcestest.Claim("ns", "shared", podresourcestest.Device(driver, "node1", "vf-2",
				"example.com/vfx=ignored", "not a CDI name", "example.com/vf=ens1f0v2")),
		}},
	}})
	pod := get(t, srv)
	got := dradevice.Local(pod, vf)
	want := []dradevice.Device{
		{ResourceName: vf, ID: "0000:3b:02.1", Claim: dradevice.Claim{Namespace: "ns", Name: "p-net-x1", Driver: driver, Pool: "node1", Device: "vf-1"}},
		{ResourceName: vf, ID: "ens1f0v2", Claim: dradevice.Claim{Namespace: "ns", Name: "shared", Driver: driver, Pool: "node1", Device: "vf-2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Local = %+v\nwant %+v", got, want)
	}
	if got := dradevice.Local(pod, "example.com/none"); len(got) != 0 {
		t.Errorf("devices of a resource the pod has none of: %+v", got)
	}
	if got := dradevice.Local(pod, ""); len(got) != 0 {
		t.Errorf("no resource name matches nothing: %+v", got)
	}
}

func TestCDIDeviceID(t *testing.T) {
	for _, tc := range []struct {
		cdi  []string
		res  string
		want string
		ok   bool
	}{
		{[]string{"example.com/vf=dev0"}, vf, "dev0", true},
		{[]string{"example.com/vf2=dev0", "example.com/vf=dev1", "example.com/vf=dev2"}, vf, "dev1", true},
		{[]string{"example.com/vf"}, vf, "", false},
		{[]string{"/dev/vf=dev0"}, vf, "", false},
		{nil, vf, "", false},
	} {
		id, ok := dradevice.CDIDeviceID(podresourcestest.Device(driver, "p", "d", tc.cdi...), tc.res)
		if id != tc.want || ok != tc.ok {
			t.Errorf("CDIDeviceID(%v, %s) = %q, %v; want %q, %v", tc.cdi, tc.res, id, ok, tc.want, tc.ok)
		}
	}
}

// The kubelet's report of a claim with two devices of one driver, as
// kubelets 1.34-1.37 give it: the second device's CDI devices are the
// first's and then its own. This is the claim the scheduler makes for
// resources.limits {example.com/hostdev: 2}; each device is found once, with
// its own ID, in a Get and in a List answer alike.
func TestLocalKubeletAccumulatedCDIDevices(t *testing.T) {
	const hostdev = "example.com/hostdev"
	claim := podresourcestest.Claim("ns", "p-extended-resources-x7k2p",
		podresourcestest.Device(driver, "node1", "ens2f0", hostdev+"=ens2f0"),
		podresourcestest.Device(driver, "node1", "ens2f1", hostdev+"=ens2f0", hostdev+"=ens2f1"),
		// Another driver's device of the same claim: its own list starts anew.
		podresourcestest.Device("gpu.example.com", "node1", "g0", "gpu.example.com/gpu=g0"))
	srv := podresourcestest.NewServer(t)
	srv.SetPod(&v1.PodResources{Namespace: "ns", Name: "p", Containers: []*v1.ContainerResources{
		{Name: "c", DynamicResources: []*v1.DynamicResource{claim}}}})
	pod := get(t, srv)
	var ids []string
	for _, d := range dradevice.Local(pod, hostdev) {
		ids = append(ids, d.ID+"@"+d.Claim.Device)
	}
	if want := []string{"ens2f0@ens2f0", "ens2f1@ens2f1"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("Local = %v, want %v", ids, want)
	}
	if got := dradevice.OwnCDIDevices(pod.GetContainers()[0].GetDynamicResources()[0], 2); !reflect.DeepEqual(got, []string{"gpu.example.com/gpu=g0"}) {
		t.Errorf("OwnCDIDevices of the other driver's device = %v", got)
	}
	// A kubelet that reports each device's own CDI devices: the same answer.
	fixed := podresourcestest.Claim("ns", "p-extended-resources-x7k2p",
		podresourcestest.Device(driver, "node1", "ens2f0", hostdev+"=ens2f0"),
		podresourcestest.Device(driver, "node1", "ens2f1", hostdev+"=ens2f1"))
	pr := &v1.PodResources{Containers: []*v1.ContainerResources{{DynamicResources: []*v1.DynamicResource{fixed}}}}
	if got := dradevice.Local(pr, hostdev); len(got) != 2 || got[0].ID != "ens2f0" || got[1].ID != "ens2f1" {
		t.Errorf("Local of per-device CDI lists = %+v", got)
	}
}

// get is the kubelet's answer for pod ns/p, read with devplumb's client.
func get(t *testing.T, srv *podresourcestest.Server) *v1.PodResources {
	t.Helper()
	c, err := podresources.New(srv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pod, err := c.Get(t.Context(), "ns", "p")
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// With device metadata on (KEP-5304), the kubelet reports each request's
// metadata CDI device <driver>/metadata=<claim uid>_<request> beside the
// device's own: LocalAll("") lists the device once, by its own CDI device,
// so a metadata name never passes for an assigned device ID.
func TestLocalAllLeavesOutDeviceMetadata(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	srv.SetPod(&v1.PodResources{Namespace: "ns", Name: "p", Containers: []*v1.ContainerResources{
		{Name: "a", DynamicResources: []*v1.DynamicResource{
			podresourcestest.Claim("ns", "c", podresourcestest.Device(driver, "node1", "vf-1",
				"example.com/vf=0000:3b:02.1", driver+"/metadata=5f2c_net")),
			// Another driver's kind named like ours is that driver's business: kept.
			podresourcestest.Claim("ns", "d", podresourcestest.Device("gpu.example.com", "node1", "g", driver+"/metadata=g")),
		}},
	}})
	got := dradevice.LocalAll(get(t, srv), "")
	want := []dradevice.Device{
		{ResourceName: vf, ID: "0000:3b:02.1", Claim: dradevice.Claim{Namespace: "ns", Name: "c", Driver: driver, Pool: "node1", Device: "vf-1"}},
		{ResourceName: driver + "/metadata", ID: "g", Claim: dradevice.Claim{Namespace: "ns", Name: "d", Driver: "gpu.example.com", Pool: "node1", Device: "g"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("LocalAll = %+v\nwant %+v", got, want)
	}
}
