//go:build vmguest

package guest

import (
	"os"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
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
// one; sriov_numvfs 4 -> 0 leaves every VF listed unhealthy ("gone"), the device-info
// file of the one a pod holds kept, and the VFs healthy again once they are back.
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
	store := devinfo.NewStore(n.devinfoDir())
	write(t, p.sysfs("sriov_numvfs"), "0")
	n.devices(netRes, allUnhealthy(vfs[:3]))
	n.devices(vfioRes, allUnhealthy(vfs[3:]))
	if _, err := store.ReadDP(netRes, held); err != nil {
		t.Errorf("the device-info of VF %s, which a pod holds, is gone with the VF: %v", held, err)
	}
	if done, err := n.dp.Exited(); done {
		t.Fatalf("netdev-dp exited: %v", err)
	}
	n.delPod("holder")
	write(t, p.sysfs("sriov_numvfs"), "4")
	n.devices(netRes, allHealthy(vfs))
	if _, err := os.Stat(p.sysfs("virtfn3")); err != nil {
		t.Fatal(err)
	}
}
