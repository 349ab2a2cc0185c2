// Package sysfs reads what netdev-dp needs to know about a PCI device from
// sysfs: IDs, driver, NUMA node, its PF, its netdevs, RDMA devices and IOMMU
// group, and the auxiliary devices (SFs) on it (aux.go). Every path is
// under a sysfs root so tests can supply a fake tree with the kernel's
// layout (bus/pci/devices/<addr> links to the device dir).
package sysfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// DefaultRoot is the real sysfs mount.
const DefaultRoot = "/sys"

var bdf = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// IsAddress tells whether s is a PCI address in dddd:bb:dd.f form.
func IsAddress(s string) bool { return bdf.MatchString(s) }

// Device is one PCI device as sysfs shows it.
type Device struct {
	Address    string   // "0000:01:00.2"
	Vendor     string   // "8086" (no 0x)
	DeviceID   string   // "154c"
	Class      string   // "020000"
	Driver     string   // "" when unbound
	NUMANode   int      // -1 when the kernel reports none
	PFAddress  string   // the PF of a VF, else ""
	NumVFs     int      // configured VFs of a PF
	VFIndex    int      // a VF's index N among its PF's virtfnN links, else -1
	ACPIIndex  string   // the firmware's acpi_index ("101"), "" when none
	NetDevs    []string // interface names in the host netns
	RDMA       []string // RDMA device names: its own, then soft-RoCE ones on its netdevs
	IOMMUGroup string   // "" without an IOMMU
	UIO        string   // its uio device ("uio0") when bound to a UIO driver (igb_uio, uio_pci_generic)
}

// IsNetwork tells whether the class is a network controller (0x02).
func (d *Device) IsNetwork() bool { return strings.HasPrefix(d.Class, "02") }

// DevicesDir is root/bus/pci/devices.
func DevicesDir(root string) string { return filepath.Join(root, "bus", "pci", "devices") }

// List returns the addresses under root/bus/pci/devices.
func List(root string) ([]string, error) {
	entries, err := os.ReadDir(DevicesDir(root))
	if err != nil {
		return nil, fmt.Errorf("list PCI devices: %w", err)
	}
	var out []string
	for _, e := range entries {
		if IsAddress(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Exists tells whether the device is still in sysfs.
func Exists(root, addr string) bool {
	_, err := os.Stat(filepath.Join(DevicesDir(root), addr))
	return err == nil
}

// Read reads one device. A missing device is an error matching os.ErrNotExist.
func Read(root, addr string) (*Device, error) {
	dir := filepath.Join(DevicesDir(root), addr)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("PCI device %s: %w", addr, err)
	}
	d := &Device{Address: addr, NUMANode: -1, VFIndex: -1}
	var err error
	if d.Vendor, err = readHex(dir, "vendor"); err != nil {
		return nil, err
	}
	if d.DeviceID, err = readHex(dir, "device"); err != nil {
		return nil, err
	}
	if d.Class, err = readHex(dir, "class"); err != nil {
		return nil, err
	}
	d.Driver = linkBase(dir, "driver")
	d.PFAddress = linkBase(dir, "physfn")
	d.IOMMUGroup = linkBase(dir, "iommu_group")
	if n, err := readInt(dir, "numa_node"); err == nil && n >= 0 {
		d.NUMANode = n
	}
	if n, err := readInt(dir, "sriov_numvfs"); err == nil {
		d.NumVFs = n
	}
	if d.PFAddress != "" {
		d.VFIndex = vfIndex(filepath.Join(DevicesDir(root), d.PFAddress), addr)
	}
	d.ACPIIndex = readTrim(dir, "acpi_index")
	if uio := dirNames(filepath.Join(dir, "uio")); len(uio) > 0 {
		d.UIO = uio[0]
	}
	d.NetDevs = dirNames(netDir(dir))
	d.RDMA = append(dirNames(filepath.Join(dir, "infiniband")), softRDMA(root, d.NetDevs)...)
	return d, nil
}

// netDir holds a PCI function's interfaces: its net/ directory, or that of
// a virtio device on it (virtio-net).
func netDir(dir string) string {
	if _, err := os.Stat(filepath.Join(dir, "net")); err == nil {
		return filepath.Join(dir, "net")
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "virtio*", "net")); len(m) > 0 {
		return m[0]
	}
	return filepath.Join(dir, "net")
}

func readHex(dir, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("PCI device %s: %w", filepath.Base(dir), err)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), nil
}

// readTrim is the trimmed content of a file, "" when it cannot be read.
func readTrim(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// vfIndex is N of the PF's virtfnN link that points at the VF, the index
// the kernel (and VF ranges like "ens1f0#0-3") count VFs by; -1 when no
// link does.
func vfIndex(pfDir, vf string) int {
	links, _ := filepath.Glob(filepath.Join(pfDir, "virtfn*"))
	for _, l := range links {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(l), "virtfn"))
		if err == nil && linkBase(pfDir, filepath.Base(l)) == vf {
			return n
		}
	}
	return -1
}

func readInt(dir, name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// linkBase is the last element of a symlink's target, "" when absent.
func linkBase(dir, name string) string {
	t, err := os.Readlink(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

func dirNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// LinkType is the link type of one of the device's netdevs as the kernel
// names it: "ether" (ARPHRD_ETHER, 1), "infiniband" (32), else the number.
func LinkType(root, addr, ifName string) string {
	return linkType(filepath.Join(netDir(filepath.Join(DevicesDir(root), addr)), ifName))
}

// linkType reads the type file of a netdev's directory.
func linkType(ifDir string) string {
	n, err := readInt(ifDir, "type")
	switch {
	case err != nil:
		return ""
	case n == 1:
		return "ether"
	case n == 32:
		return "infiniband"
	}
	return strconv.Itoa(n)
}

// OperState is the operational state of one of the device's netdevs as the
// kernel reports it (RFC 2863: "up", "down", "lowerlayerdown", "unknown",
// ...), "" when it cannot be read.
func OperState(root, addr, ifName string) string {
	b, err := os.ReadFile(filepath.Join(netDir(filepath.Join(DevicesDir(root), addr)), ifName, "operstate"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// NetDevPCIAddress returns the PCI address behind a host interface, or ""
// when it is not a PCI device. root/class/net/<name>/device is the PCI
// device itself, or a bus device on it (virtio-net: virtioN, whose parent
// directory is the PCI function).
func NetDevPCIAddress(root, ifName string) string {
	dev, err := filepath.EvalSymlinks(filepath.Join(root, "class", "net", ifName, "device"))
	if err != nil {
		return ""
	}
	for _, dir := range []string{dev, filepath.Dir(dev)} {
		if addr := filepath.Base(dir); IsAddress(addr) && linkBase(dir, "subsystem") == "pci" {
			return addr
		}
	}
	return ""
}

// ErrNotExist reports whether err says a device is gone.
func ErrNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
