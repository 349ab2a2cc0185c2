// Package sysfstest builds fake sysfs trees with the kernel's layout for
// tests of the PCI and vDPA sources: device directories under devices/, links
// from bus/*/devices, driver, physfn and iommu_group links, net/ and
// infiniband/ subdirectories.
package sysfstest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// PCI describes one fake PCI device.
type PCI struct {
	Addr, Vendor, Device, Class, Driver string
	NUMA                                int
	PF                                  string // PF address of a VF
	NumVFs                              int
	Net, RDMA                           []string
	IOMMUGroup                          string
}

func pciDir(root, addr string) string {
	return filepath.Join(root, "devices", "pci0000:00", addr)
}

// AddPCI creates the device.
func AddPCI(t testing.TB, root string, d PCI) {
	t.Helper()
	dir := pciDir(root, d.Addr)
	mkdir(t, dir)
	write(t, filepath.Join(dir, "vendor"), "0x"+d.Vendor)
	write(t, filepath.Join(dir, "device"), "0x"+d.Device)
	write(t, filepath.Join(dir, "class"), "0x"+d.Class)
	write(t, filepath.Join(dir, "numa_node"), fmt.Sprint(d.NUMA))
	write(t, filepath.Join(dir, "sriov_numvfs"), fmt.Sprint(d.NumVFs))
	if d.Driver != "" {
		mkdir(t, filepath.Join(root, "bus", "pci", "drivers", d.Driver))
		link(t, filepath.Join("..", "..", "..", "bus", "pci", "drivers", d.Driver), filepath.Join(dir, "driver"))
	}
	if d.PF != "" {
		link(t, filepath.Join("..", d.PF), filepath.Join(dir, "physfn"))
	}
	if d.IOMMUGroup != "" {
		mkdir(t, filepath.Join(root, "kernel", "iommu_groups", d.IOMMUGroup))
		link(t, filepath.Join("..", "..", "..", "kernel", "iommu_groups", d.IOMMUGroup), filepath.Join(dir, "iommu_group"))
	}
	for _, n := range d.Net {
		mkdir(t, filepath.Join(dir, "net", n))
		write(t, filepath.Join(dir, "net", n, "type"), "1") // ARPHRD_ETHER
	}
	for _, n := range d.RDMA {
		mkdir(t, filepath.Join(dir, "infiniband", n))
	}
	mkdir(t, filepath.Join(root, "bus", "pci", "devices"))
	link(t, filepath.Join("..", "..", "..", "devices", "pci0000:00", d.Addr), filepath.Join(root, "bus", "pci", "devices", d.Addr))
}

// RemovePCI removes the device, as a hot unplug or VF removal does.
func RemovePCI(t testing.TB, root, addr string) {
	t.Helper()
	if err := os.RemoveAll(pciDir(root, addr)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "bus", "pci", "devices", addr)); err != nil {
		t.Fatal(err)
	}
}

// AddVDPA creates vDPA device name on a PCI parent (which AddPCI made), bound
// to driver "vhost_vdpa" (with vhost-vdpa-<index>) or "virtio_vdpa" (with
// virtio<index>).
func AddVDPA(t testing.TB, root, name, parent, driver string, index int) {
	t.Helper()
	dir := filepath.Join(pciDir(root, parent), name)
	mkdir(t, dir)
	mkdir(t, filepath.Join(root, "bus", "vdpa", "drivers", driver))
	link(t, filepath.Join("..", "..", "..", "..", "bus", "vdpa", "drivers", driver), filepath.Join(dir, "driver"))
	switch driver {
	case "vhost_vdpa":
		mkdir(t, filepath.Join(dir, fmt.Sprintf("vhost-vdpa-%d", index)))
	case "virtio_vdpa":
		mkdir(t, filepath.Join(dir, fmt.Sprintf("virtio%d", index)))
	}
	mkdir(t, filepath.Join(root, "bus", "vdpa", "devices"))
	link(t, filepath.Join("..", "..", "..", "devices", "pci0000:00", parent, name), filepath.Join(root, "bus", "vdpa", "devices", name))
}

func mkdir(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func link(t testing.TB, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// AddNetDev makes root/class/net/<ifName>/device point at PCI device addr
// (which AddPCI made), as sysfs does for a PCI NIC's interface.
func AddNetDev(t testing.TB, root, ifName, addr string) {
	t.Helper()
	dir := filepath.Join(root, "class", "net", ifName)
	mkdir(t, dir)
	link(t, filepath.Join("..", "..", "..", "devices", "pci0000:00", addr), filepath.Join(dir, "device"))
	mkdir(t, filepath.Join(root, "bus", "pci"))
	link(t, filepath.Join("..", "..", "bus", "pci"), filepath.Join(pciDir(root, addr), "subsystem"))
}
