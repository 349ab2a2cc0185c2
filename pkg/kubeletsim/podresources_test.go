package kubeletsim_test

import (
	"slices"
	"testing"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/kubeletsim/kubeletsimtest"
	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
	"github.com/devplumb/devplumb/podresources"
)

func numaOf(cd *v1.ContainerDevices) []int64 {
	var out []int64
	for _, n := range cd.GetTopology().GetNodes() {
		out = append(out, n.GetID())
	}
	return out
}

// PodResources answers match the allocations, grouped per NUMA node as the
// kubelet groups them, also through the List fallback.
func TestPodResourcesMatchAllocations(t *testing.T) {
	n, err := kubeletsim.StartWithOptions(t.Context(), root(t), quiet(),
		kubeletsim.Options{PodResources: podresourcesserver.Config{GetMode: podresourcesserver.GetDisabled}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock",
		kubeletsimtest.Dev("a", 1), kubeletsimtest.Dev("b", 0), kubeletsimtest.Dev("c", 1), kubeletsimtest.Dev("d"), kubeletsimtest.Dev("e", 0))
	p.Start(t.Context(), false)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddPod(t.Context(), pod("p1", ctr("x", 4))); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddPod(t.Context(), pod("p2", ctr("y", 1))); err != nil {
		t.Fatal(err)
	}
	c := podresourcesClient(t, n)
	pr, err := c.Get(t.Context(), "ns", "p1")
	if err != nil {
		t.Fatal(err)
	}
	devs := pr.GetContainers()[0].GetDevices()
	if len(devs) != 3 ||
		!slices.Equal(devs[0].GetDeviceIds(), []string{"a", "c"}) || !slices.Equal(numaOf(devs[0]), []int64{1}) ||
		!slices.Equal(devs[1].GetDeviceIds(), []string{"b"}) || !slices.Equal(numaOf(devs[1]), []int64{0}) ||
		!slices.Equal(devs[2].GetDeviceIds(), []string{"d"}) || devs[2].GetTopology() != nil {
		t.Fatalf("p1 devices = %v", devs)
	}
	list, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Same devices; the order is the kubelet's (grouped per NUMA node), not Allocate's.
	for i, a := range n.Pods() {
		got, want := podresources.DevicesOf(list[i], vf), a.Devices(vf)
		slices.Sort(got)
		slices.Sort(want)
		if list[i].GetName() != a.Name || !slices.Equal(got, want) {
			t.Errorf("List[%d] = %v, allocation %+v", i, list[i], a)
		}
	}
	alloc, err := c.Allocatable(t.Context())
	if err != nil || len(alloc.GetDevices()) != 5 || !slices.Equal(numaOf(alloc.GetDevices()[0]), []int64{1}) {
		t.Fatalf("Allocatable = %v, %v", alloc, err)
	}
}
