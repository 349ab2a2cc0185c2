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
	c, err := podresources.New(srv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pod, err := c.Get(t.Context(), "ns", "p")
	if err != nil {
		t.Fatal(err)
	}
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
