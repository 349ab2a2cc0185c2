package sysfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// AuxDevice is one device of the auxiliary bus that sits on a PCI function
// (bus/auxiliary/devices/<name> links to <the function's dir>/<name>): an
// mlx5 subfunction "mlx5_core.sf.4", or a driver's own parts
// ("mlx5_core.eth.0", "mlx5_core.rdma.0").
type AuxDevice struct {
	Name    string   // "mlx5_core.sf.4": <driver>.<type>.<id>
	Type    string   // "sf"
	Parent  string   // the PCI function's address
	SFNum   int      // a subfunction's number (its sfnum file), else -1
	NetDevs []string // interface names in the host netns
	RDMA    []string // RDMA device names: its own, then soft-RoCE ones on its netdevs
}

// AuxDevicesDir is root/bus/auxiliary/devices.
func AuxDevicesDir(root string) string { return filepath.Join(root, "bus", "auxiliary", "devices") }

// AuxType is the type part of an auxiliary device name (<driver>.<type>.<id>,
// id a number), "" when name is not one.
func AuxType(name string) string {
	parts := strings.Split(name, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return ""
	}
	if _, err := strconv.ParseUint(parts[2], 10, 32); err != nil {
		return ""
	}
	return parts[1]
}

// AuxOf names the auxiliary devices that sit directly on the PCI function
// (those the kernel lists on the auxiliary bus), sorted. Nested ones (an
// SF's own mlx5_core.eth.N) are not its.
func AuxOf(root, addr string) []string {
	var out []string
	for _, name := range dirNames(filepath.Join(DevicesDir(root), addr)) {
		if AuxType(name) != "" && auxParent(root, name) == addr {
			out = append(out, name)
		}
	}
	return out
}

// auxParent is the directory above the auxiliary device as its bus link
// resolves, "" when the bus does not list it.
func auxParent(root, name string) string {
	dir, err := filepath.EvalSymlinks(filepath.Join(AuxDevicesDir(root), name))
	if err != nil {
		return ""
	}
	return filepath.Base(filepath.Dir(dir))
}

// AuxExists tells whether the bus still lists the auxiliary device.
func AuxExists(root, name string) bool {
	_, err := os.Stat(filepath.Join(AuxDevicesDir(root), name))
	return err == nil
}

// ReadAux reads one auxiliary device. A missing device is an error matching
// os.ErrNotExist; one whose parent is not a PCI function is an error.
func ReadAux(root, name string) (*AuxDevice, error) {
	dir := filepath.Join(AuxDevicesDir(root), name)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("auxiliary device %s: %w", name, err)
	}
	a := &AuxDevice{Name: name, Type: AuxType(name), Parent: auxParent(root, name), SFNum: -1}
	if !IsAddress(a.Parent) {
		return nil, fmt.Errorf("auxiliary device %s: its parent %q is not a PCI function", name, a.Parent)
	}
	if n, err := readInt(dir, "sfnum"); err == nil && n >= 0 {
		a.SFNum = n
	}
	a.NetDevs = dirNames(filepath.Join(dir, "net"))
	a.RDMA = append(dirNames(filepath.Join(dir, "infiniband")), softRDMA(root, a.NetDevs)...)
	return a, nil
}

// AuxLinkType is the link type of one of the auxiliary device's netdevs, as
// LinkType.
func AuxLinkType(root, name, ifName string) string {
	return linkType(filepath.Join(AuxDevicesDir(root), name, "net", ifName))
}
