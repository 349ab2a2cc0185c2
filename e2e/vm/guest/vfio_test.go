//go:build vmguest

package guest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
)

// bindDriver rebinds the PCI function to driver, as an administrator does: the
// driver_override, an unbind from its driver, a probe.
func bindDriver(t *testing.T, addr, driver string) {
	t.Helper()
	dir := filepath.Join(sysfs.DevicesDir(sysfs.DefaultRoot), addr)
	write(t, filepath.Join(dir, "driver_override"), driver)
	if _, err := os.Stat(filepath.Join(dir, "driver")); err == nil {
		write(t, filepath.Join(dir, "driver", "unbind"), addr)
	}
	write(t, "/sys/bus/pci/drivers_probe", addr)
	d, err := sysfs.Read(sysfs.DefaultRoot, addr)
	e2etest.Must(t, err)
	if d.Driver != driver {
		t.Fatalf("%s is bound to %q after a probe for %s", addr, d.Driver, driver)
	}
}

// A VF bound to vfio-pci is advertised as the resource selecting vfio-pci (its sibling
// on igbvf as the other), with /dev/vfio/vfio and its IOMMU group's node in the
// Allocate response and its CDI device, which the CDI library injects into a
// container's spec; its device-info says pci, its address and its PF, and no netdev.
func TestVFIOVFHasItsGroupNodes(t *testing.T) {
	p := pfs(t)[1]
	vfs := p.setVFs(t, 2)
	bindDriver(t, vfs[0], "vfio-pci")
	group, err := os.Readlink(filepath.Join(sysfs.DevicesDir(sysfs.DefaultRoot), vfs[0], "iommu_group"))
	if err != nil {
		t.Fatalf("VF %s has no IOMMU group: %v", vfs[0], err)
	}
	groupNode := filepath.Join("/dev/vfio", filepath.Base(group))
	for _, node := range []string{groupNode, "/dev/vfio/vfio"} {
		if _, err := os.Stat(node); err != nil {
			t.Fatalf("the kernel made no %s: %v", node, err)
		}
	}
	t.Logf("VF %s on vfio-pci, IOMMU group node %s", vfs[0], groupNode)
	const vfioRes, netRes = "devplumb.io/vfio", "devplumb.io/vf-net"
	n := startNode(t,
		resource{vfioRes, map[string]any{"drivers": []string{"vfio-pci"}, "pfNames": []string{p.netdev}}},
		resource{netRes, map[string]any{"drivers": []string{"igbvf"}, "pfNames": []string{p.netdev}}})
	n.devices(vfioRes, allHealthy(vfs[:1]))
	n.devices(netRes, allHealthy(vfs[1:]))

	alloc, err := n.addPod("dpdk", vfioRes, 1)
	e2etest.Must(t, err)
	r := alloc.Containers[0].Resources[0].Response
	var paths []string
	for _, d := range r.Devices {
		paths = append(paths, d.HostPath)
	}
	if !slices.Contains(paths, "/dev/vfio/vfio") || !slices.Contains(paths, groupNode) {
		t.Errorf("Allocate response devices %v, want /dev/vfio/vfio and %s", paths, groupNode)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(filepath.Join(n.root, "cdi")), cdi.WithAutoRefresh(false))
	e2etest.Must(t, err)
	var names []string
	for _, c := range r.CdiDevices {
		names = append(names, c.Name)
	}
	spec := &oci.Spec{Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, names...); err != nil {
		t.Fatalf("CDI devices %v: %v", names, err)
	}
	var injected []string
	for _, d := range spec.Linux.Devices {
		injected = append(injected, d.Path)
	}
	if !slices.Contains(injected, "/dev/vfio/vfio") || !slices.Contains(injected, groupNode) {
		t.Errorf("the container's spec after CDI has devices %v, want /dev/vfio/vfio and %s", injected, groupNode)
	}
	t.Logf("CDI devices %v put %v into the container", names, injected)

	info, err := devinfo.NewStore(n.devinfoDir()).ReadDP(vfioRes, vfs[0])
	e2etest.Must(t, err)
	if info.Type != devinfo.TypePCI || info.Pci == nil || info.Pci.PciAddress != vfs[0] || info.Pci.PfPciAddress != p.addr {
		t.Errorf("device-info %+v, want pci %s of PF %s", info, vfs[0], p.addr)
	}
	if netdevs := vfNetdevs(vfs[0]); len(netdevs) != 0 {
		t.Errorf("the vfio-pci VF has netdevs %v", netdevs)
	}
	n.delPod("dpdk")
}
