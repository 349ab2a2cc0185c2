//go:build vmguest

package guest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
)

// allUnhealthy holds when the resource has exactly want, none healthy.
func allUnhealthy(want []string) func([]kubeletsim.Device) bool {
	return func(devs []kubeletsim.Device) bool {
		return !slices.ContainsFunc(devs, kubeletsim.Device.Healthy) && slices.Equal(ids(devs), sorted(want))
	}
}

// Real kernel events reach the kubelet (nodesim) through netdev-dp's ListAndWatch
// without a restart: the PF's link down makes its VFs unhealthy and up healthy again;
// a VF rebound from igbvf to vfio-pci moves from the igbvf resource to the vfio-pci
// one; sriov_numvfs 4 -> 0 removes the free VFs from both resources with their
// device-info files and CDI spec entries, while the VF a pod holds stays listed,
// unhealthy, with its files, until its pod is gone; the VFs are back, healthy, with
// sriov_numvfs 4.
func TestHealthFollowsKernelEvents(t *testing.T) {
	p := pfs(t)[1]
	vfs := p.setVFs(t, 4)
	const netRes, vfioRes = "devplumb.io/vf-igbvf", "devplumb.io/vf-vfio"
	n := startNode(t,
		resource{netRes, map[string]any{"drivers": []string{"igbvf"}, "pfNames": []string{p.netdev}}},
		resource{vfioRes, map[string]any{"drivers": []string{"vfio-pci"}, "pfNames": []string{p.netdev}}})
	n.devices(netRes, allHealthy(vfs))

	link, err := netlink.LinkByName(p.netdev)
	e2etest.Must(t, err)
	e2etest.Must(t, netlink.LinkSetDown(link))
	n.devices(netRes, allUnhealthy(vfs))
	t.Logf("PF %s down: its VFs %v unhealthy", p.netdev, vfs)
	e2etest.Must(t, netlink.LinkSetUp(link))
	n.devices(netRes, allHealthy(vfs))

	bindDriver(t, vfs[3], "vfio-pci")
	n.devices(netRes, allHealthy(vfs[:3]))
	n.devices(vfioRes, allHealthy(vfs[3:]))
	t.Logf("VF %s rebound to vfio-pci: moved from %s to %s", vfs[3], netRes, vfioRes)

	alloc, err := n.addPod("holder", netRes, 1)
	e2etest.Must(t, err)
	held := alloc.Containers[0].Resources[0].DeviceIDs[0]
	n.wantFiles(netRes, vfs[:3], vfs[:3]...)
	n.wantFiles(vfioRes, vfs[3:], vfs[3:]...)
	write(t, p.sysfs("sriov_numvfs"), "0")
	n.devices(netRes, allUnhealthy([]string{held}))
	n.devices(vfioRes, allUnhealthy(nil))
	n.wantFiles(netRes, vfs[:3], held)
	n.wantFiles(vfioRes, vfs[3:])
	t.Logf("sriov_numvfs 0: the free VFs gone with their files; VF %s, which a pod holds, listed unhealthy with its files", held)
	if done, err := n.dp.Exited(); done {
		t.Fatalf("netdev-dp exited: %v", err)
	}
	n.delPod("holder")
	n.devices(netRes, allUnhealthy(nil))
	n.wantFiles(netRes, vfs[:3])
	t.Logf("its pod gone, VF %s is gone too, with its files", held)
	write(t, p.sysfs("sriov_numvfs"), "4")
	n.devices(netRes, allHealthy(vfs))
	n.wantFiles(netRes, vfs, vfs...)
	if _, err := os.Stat(p.sysfs("virtfn3")); err != nil {
		t.Fatal(err)
	}
}

// wantFiles checks that of the devices ids of res, exactly those in want have a
// device-info file and an entry in res's CDI spec (as a runtime's CDI cache reads it).
func (n *node) wantFiles(res string, ids []string, want ...string) {
	n.t.Helper()
	store := devinfo.NewStore(n.devinfoDir())
	cache, err := cdi.NewCache(cdi.WithSpecDirs(filepath.Join(n.root, "cdi")), cdi.WithAutoRefresh(false))
	e2etest.Must(n.t, err)
	for _, id := range ids {
		wanted := slices.Contains(want, id)
		if _, err := store.ReadDP(res, id); (err == nil) != wanted {
			n.t.Errorf("%s device-info of %s: %v, want it there: %v", res, id, err, wanted)
		}
		name := res + "=" + cdispec.DeviceName(id)
		if got := cache.GetDevice(name) != nil; got != wanted {
			n.t.Errorf("CDI device %s in the spec: %v, want %v", name, got, wanted)
		}
	}
}
