// Package sysfstest builds fake sysfs trees with the kernel's layout for
// tests of the PCI and vDPA sources: device directories under devices/, links
// from bus/*/devices, driver, physfn and iommu_group links, net/ and
// infiniband/ subdirectories.
package sysfstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	ACPIIndex                           string // acpi_index, written when set
	UIO                                 string // its uio device ("uio0") when bound to a UIO driver
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
		addVirtfn(t, root, d.PF, d.Addr)
	}
	if d.UIO != "" {
		mkdir(t, filepath.Join(dir, "uio", d.UIO))
	}
	if d.ACPIIndex != "" {
		write(t, filepath.Join(dir, "acpi_index"), d.ACPIIndex)
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

// addVirtfn links the PF's lowest free virtfnN to the VF, as the kernel
// numbers VFs: the VFs of a PF get indexes 0, 1, ... in the order they are
// added. A PF that AddPCI has not made gets no link.
func addVirtfn(t testing.TB, root, pf, vf string) {
	t.Helper()
	pfDir := pciDir(root, pf)
	if _, err := os.Stat(pfDir); err != nil {
		return
	}
	for i := 0; ; i++ {
		l := filepath.Join(pfDir, fmt.Sprintf("virtfn%d", i))
		if _, err := os.Lstat(l); os.IsNotExist(err) {
			link(t, filepath.Join("..", vf), l)
			return
		}
	}
}

// RemovePCI removes the device, as a hot unplug or VF removal does.
func RemovePCI(t testing.TB, root, addr string) {
	t.Helper()
	if pf, err := os.Readlink(filepath.Join(pciDir(root, addr), "physfn")); err == nil {
		links, _ := filepath.Glob(filepath.Join(pciDir(root, filepath.Base(pf)), "virtfn*"))
		for _, l := range links {
			if target, _ := os.Readlink(l); filepath.Base(target) == addr {
				os.Remove(l)
			}
		}
	}
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

// AddRDMAChar creates the class devices of RDMA device ibdev's user-space
// char devices (uverbsN, umadN, issmN) and the rdma_cm misc device, as
// ib_uverbs, ib_umad and rdma_ucm do.
func AddRDMAChar(t testing.TB, root, ibdev string, n int) {
	t.Helper()
	for _, c := range [][2]string{{"infiniband_verbs", "uverbs"}, {"infiniband_mad", "umad"}, {"infiniband_mad", "issm"}} {
		dir := filepath.Join(root, "class", c[0], fmt.Sprintf("%s%d", c[1], n))
		mkdir(t, dir)
		write(t, filepath.Join(dir, "ibdev"), ibdev)
	}
	AddMisc(t, root, "rdma_cm")
}

// AddMisc creates misc class devices (class/misc/<name>), as the kernel
// lists vhost-net, tun and rdma_cm when their modules are loaded.
func AddMisc(t testing.TB, root string, names ...string) {
	t.Helper()
	for _, n := range names {
		mkdir(t, filepath.Join(root, "class", "misc", n))
	}
}

// AddSoftRoCE creates soft-RoCE device ibdev on netdev, as
// "rdma link add <ibdev> type rxe netdev <netdev>" does: a class/infiniband
// device that is no PCI function's child, whose port 1 names the netdev.
func AddSoftRoCE(t testing.TB, root, ibdev, netdev string) {
	t.Helper()
	dir := filepath.Join(root, "class", "infiniband", ibdev, "ports", "1", "gid_attrs", "ndevs")
	mkdir(t, dir)
	write(t, filepath.Join(dir, "0"), netdev)
}

// SetLinkType writes the ARPHRD type of netdev ifName of PCI device addr
// (1 ether, 32 infiniband), which AddPCI made as ether.
func SetLinkType(t testing.TB, root, addr, ifName string, arphrd int) {
	t.Helper()
	write(t, filepath.Join(pciDir(root, addr), "net", ifName, "type"), fmt.Sprint(arphrd))
}

// SetOperState writes the operstate of netdev ifName of PCI device addr
// (which AddPCI made with that netdev), as the kernel shows a link going
// down ("down") or up ("up").
func SetOperState(t testing.TB, root, addr, ifName, state string) {
	t.Helper()
	write(t, filepath.Join(pciDir(root, addr), "net", ifName, "operstate"), state)
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

// The fixtures' NIC: an Intel E810 PF with its VFs, as the netdev-dp tests
// of every layer describe it.
const (
	IntelVendor = "8086"
	E810PFID    = "1592" // device ID of the PF (driver ice)
	E810VFID    = "1889" // device ID of its VFs (driver iavf)
	NetClass    = "020000"
)

// E810PF is an E810 PF at addr on NUMA node numa with numVFs VFs and the
// given netdevs.
func E810PF(addr string, numa, numVFs int, net ...string) PCI {
	return PCI{Addr: addr, Vendor: IntelVendor, Device: E810PFID, Class: NetClass, Driver: "ice", NUMA: numa, NumVFs: numVFs, Net: net}
}

// E810VF is a VF of PF pf at addr on NUMA node numa, bound to iavf.
func E810VF(addr, pf string, numa int) PCI {
	return PCI{Addr: addr, Vendor: IntelVendor, Device: E810VFID, Class: NetClass, Driver: "iavf", NUMA: numa, PF: pf}
}

// NodePF is the PF AddNode creates, with netdev NodePFName.
const (
	NodePF     = "0000:01:00.0"
	NodePFName = "ens1f0"
)

// AddNode creates the node both netdev-dp modes are tested on: E810 PF
// NodePF (netdev ens1f0) with four VFs 0000:01:01.0-3, the first two on
// NUMA node 1 and bound to iavf (the first with netdev ens1f0v0), the last
// two on NUMA node 0 and bound to vfio-pci (IOMMU groups 42, 43); and a
// vDPA-capable NIC elsewhere (0000:65:00.2, NUMA node 1, no netdev named
// ens1f0) with vhost-vdpa device vdpa0 (/dev/vhost-vdpa-3).
func AddNode(t testing.TB, root string) {
	t.Helper()
	AddPCI(t, root, E810PF(NodePF, 0, 4, NodePFName))
	for i, numa := range []int{1, 1, 0, 0} {
		vf := E810VF(fmt.Sprintf("0000:01:01.%d", i), NodePF, numa)
		if i == 0 {
			vf.Net = []string{NodePFName + "v0"}
		}
		if i >= 2 {
			vf.Driver, vf.IOMMUGroup = "vfio-pci", fmt.Sprint(40+i)
		}
		AddPCI(t, root, vf)
	}
	AddPCI(t, root, PCI{Addr: "0000:65:00.2", Vendor: "15b3", Device: "101e", Class: NetClass, Driver: "mlx5_core", NUMA: 1})
	AddVDPA(t, root, "vdpa0", "0000:65:00.2", "vhost_vdpa", 3)
}

// Aux describes one fake auxiliary device on a PCI function (which AddPCI
// made), as the kernel lays it out: <function dir>/<Name> with its sfnum,
// net/ and infiniband/, a subsystem link to the auxiliary bus, and
// bus/auxiliary/devices/<Name> linking to it.
type Aux struct {
	Name   string // "mlx5_core.sf.4"
	Parent string // the PCI function's address
	SFNum  int    // written when >= 0 (subfunctions only)
	Net    []string
	RDMA   []string
}

// AddAux creates the auxiliary device.
func AddAux(t testing.TB, root string, a Aux) {
	t.Helper()
	addAux(t, root, filepath.Join(pciDir(root, a.Parent), a.Name), filepath.Join("pci0000:00", a.Parent, a.Name), a)
}

// AddNestedAux creates auxiliary device a under auxiliary device parent
// (an SF's own mlx5_core.eth.N), which the bus lists too; a.Parent is
// the PCI function under parent.
func AddNestedAux(t testing.TB, root, parent string, a Aux) {
	t.Helper()
	rel := filepath.Join("pci0000:00", a.Parent, parent, a.Name)
	addAux(t, root, filepath.Join(root, "devices", rel), rel, a)
}

func addAux(t testing.TB, root, dir, rel string, a Aux) {
	t.Helper()
	mkdir(t, dir)
	if a.SFNum >= 0 {
		write(t, filepath.Join(dir, "sfnum"), fmt.Sprint(a.SFNum))
	}
	for _, n := range a.Net {
		mkdir(t, filepath.Join(dir, "net", n))
		write(t, filepath.Join(dir, "net", n, "type"), "1") // ARPHRD_ETHER
	}
	for _, n := range a.RDMA {
		mkdir(t, filepath.Join(dir, "infiniband", n))
	}
	bus := filepath.Join(root, "bus", "auxiliary")
	mkdir(t, filepath.Join(bus, "devices"))
	link(t, filepath.Join(strings.Repeat("../", strings.Count(rel, "/")+1), "..", "bus", "auxiliary"), filepath.Join(dir, "subsystem"))
	link(t, filepath.Join("..", "..", "..", "devices", rel), filepath.Join(bus, "devices", a.Name))
}

// RemoveAux removes an auxiliary device on a PCI function, as deleting an
// SF (devlink port del) does.
func RemoveAux(t testing.TB, root, parent, name string) {
	t.Helper()
	for _, p := range []string{filepath.Join(root, "bus", "auxiliary", "devices", name), filepath.Join(pciDir(root, parent), name)} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
}

// SetAuxLinkType writes the ARPHRD type of netdev ifName of auxiliary
// device name (1 ether, 32 infiniband).
func SetAuxLinkType(t testing.TB, root, name, ifName string, arphrd int) {
	t.Helper()
	write(t, filepath.Join(root, "bus", "auxiliary", "devices", name, "net", ifName, "type"), fmt.Sprint(arphrd))
}
