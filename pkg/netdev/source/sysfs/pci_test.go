package sysfs_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

func TestReadAndNetDev(t *testing.T) {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.E810PF("0000:01:00.0", 1, 2, "ens1f0"))
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:01:01.0", Vendor: "8086", Device: "1889", Class: "020000", Driver: "vfio-pci", NUMA: -1, PF: "0000:01:00.0", IOMMUGroup: "7", RDMA: []string{"irdma0"}})
	sysfstest.AddNetDev(t, root, "ens1f0", "0000:01:00.0")

	addrs, err := sysfs.List(root)
	if err != nil || !slices.Equal(addrs, []string{"0000:01:00.0", "0000:01:01.0"}) {
		t.Fatalf("List: %v %v", addrs, err)
	}
	pf, err := sysfs.Read(root, "0000:01:00.0")
	if err != nil || pf.VFIndex != -1 || pf.ACPIIndex != "" || pf.Vendor != "8086" || pf.DeviceID != "1592" || !pf.IsNetwork() || pf.NUMANode != 1 || pf.NumVFs != 2 || pf.Driver != "ice" {
		t.Fatalf("PF %+v %v", pf, err)
	}
	vf, err := sysfs.Read(root, "0000:01:01.0")
	if err != nil || vf.PFAddress != "0000:01:00.0" || vf.VFIndex != 0 || vf.IOMMUGroup != "7" || vf.NUMANode != -1 || !slices.Equal(vf.RDMA, []string{"irdma0"}) {
		t.Fatalf("VF %+v %v", vf, err)
	}
	if got := sysfs.LinkType(root, "0000:01:00.0", "ens1f0"); got != "ether" {
		t.Errorf("LinkType = %q", got)
	}
	if got := sysfs.NetDevPCIAddress(root, "ens1f0"); got != "0000:01:00.0" {
		t.Errorf("NetDevPCIAddress = %q", got)
	}
	// virtio-net: the interface's device is virtioN on the PCI function.
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:00:03.0", Vendor: "1af4", Device: "1000", Class: "020000", Driver: "virtio-pci"})
	sysfstest.AddNetDev(t, root, "eth0", "0000:00:03.0")
	virtio := filepath.Join(root, "devices", "pci0000:00", "0000:00:03.0", "virtio2")
	os.MkdirAll(virtio, 0o755)
	os.Remove(filepath.Join(root, "class", "net", "eth0", "device"))
	os.Symlink(filepath.Join("..", "..", "..", "devices", "pci0000:00", "0000:00:03.0", "virtio2"), filepath.Join(root, "class", "net", "eth0", "device"))
	if got := sysfs.NetDevPCIAddress(root, "eth0"); got != "0000:00:03.0" {
		t.Errorf("NetDevPCIAddress(virtio eth0) = %q", got)
	}
	os.MkdirAll(filepath.Join(virtio, "net", "eth0"), 0o755)
	os.WriteFile(filepath.Join(virtio, "net", "eth0", "type"), []byte("1\n"), 0o644)
	if d, err := sysfs.Read(root, "0000:00:03.0"); err != nil || !slices.Equal(d.NetDevs, []string{"eth0"}) {
		t.Errorf("virtio-net function's interfaces: %+v %v", d, err)
	}
	if got := sysfs.LinkType(root, "0000:00:03.0", "eth0"); got != "ether" {
		t.Errorf("LinkType(virtio eth0) = %q", got)
	}
	if got := sysfs.NetDevPCIAddress(root, "lo"); got != "" {
		t.Errorf("NetDevPCIAddress(lo) = %q", got)
	}
	if _, err := sysfs.Read(root, "0000:09:00.0"); !sysfs.ErrNotExist(err) {
		t.Errorf("missing device: %v", err)
	}
}
