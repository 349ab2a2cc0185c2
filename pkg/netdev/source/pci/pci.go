// Package pci is the device source that finds network PCI devices (PFs and
// VFs) in sysfs for one resource, selected by vendor, device ID, driver, PF
// name and link type. The device ID is the PCI address. A PF with VFs
// configured is left out: its VFs are the devices. A device bound to
// vfio-pci needs /dev/vfio/vfio and its IOMMU group's node in the container.
//
// Health: a device stays in sysfs while a CNI plugin moves its netdev into a
// pod (only the netdev changes namespace), so in-use devices stay Healthy. A
// device that leaves sysfs (hot unplug, VFs removed) becomes Unhealthy and
// stays listed, so a pod holding it is not silently forgotten; it becomes
// Healthy again if it returns. A VF whose PF's link is down (the PF's netdev
// has operstate "down" or "lowerlayerdown") is Unhealthy until the link is
// up again: no traffic leaves the VF meanwhile. A PF device's own link state
// does not count: an unused PF is often down until a pod sets it up.
package pci

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sync"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
)

// Selectors choose devices; an empty list matches everything, a device must
// match every non-empty list.
type Selectors struct {
	Vendors   []string `json:"vendors,omitempty"`   // "8086"
	Devices   []string `json:"devices,omitempty"`   // "154c"
	Drivers   []string `json:"drivers,omitempty"`   // "iavf", "vfio-pci"
	PFNames   []string `json:"pfNames,omitempty"`   // PF netdev names (for a PF: its own)
	LinkTypes []string `json:"linkTypes,omitempty"` // "ether", "infiniband"
}

// Source is the PCI source of one resource.
type Source struct {
	root string
	sel  Selectors

	mu    sync.Mutex
	known map[string]source.Device // devices seen, kept when they leave sysfs
}

// New checks sel and returns a source reading sysfs under root ("" means /sys).
func New(root string, sel Selectors) (*Source, error) {
	if err := sel.Validate(); err != nil {
		return nil, err
	}
	if root == "" {
		root = sysfs.DefaultRoot
	}
	return &Source{root: root, sel: sel, known: map[string]source.Device{}}, nil
}

// hexID is how sysfs IDs are compared: four lower-case hex digits, no "0x".
var hexID = regexp.MustCompile(`^[0-9a-f]{4}$`)

// Validate refuses IDs written in a form that can never match (sysfs shows
// "0x8086"; selectors take "8086"), which would leave the source silently
// empty, and empty names.
func (sel Selectors) Validate() error {
	for what, ids := range map[string][]string{"vendors": sel.Vendors, "devices": sel.Devices} {
		for _, id := range ids {
			if !hexID.MatchString(id) {
				return fmt.Errorf("pci source: %s: %q is not a PCI ID of four lower-case hex digits without 0x, like \"8086\"", what, id)
			}
		}
	}
	for what, names := range map[string][]string{"drivers": sel.Drivers, "pfNames": sel.PFNames, "linkTypes": sel.LinkTypes} {
		if slices.Contains(names, "") {
			return fmt.Errorf("pci source: %s: empty name", what)
		}
	}
	return nil
}

// Kind is "pci".
func (s *Source) Kind() string { return "pci" }

// Scan lists the selected devices.
func (s *Source) Scan() ([]source.Device, error) {
	addrs, err := sysfs.List(s.root)
	if err != nil {
		return nil, fmt.Errorf("pci source: %w", err)
	}
	found := map[string]source.Device{}
	for _, addr := range addrs {
		d, err := sysfs.Read(s.root, addr)
		if err != nil {
			if sysfs.ErrNotExist(err) {
				continue // removed while we looked
			}
			return nil, fmt.Errorf("pci source: %w", err)
		}
		if s.selected(d) {
			found[addr] = s.withPFLink(device(d), d)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := source.KeepVanished(s.known, found, "PCI function gone from sysfs", func(addr string) bool { return !sysfs.Exists(s.root, addr) })
	s.known = found
	return out, nil
}

func (s *Source) selected(d *sysfs.Device) bool {
	if !d.IsNetwork() || d.NumVFs > 0 {
		return false
	}
	if !match(s.sel.Vendors, d.Vendor) || !match(s.sel.Devices, d.DeviceID) || !match(s.sel.Drivers, d.Driver) {
		return false
	}
	if len(s.sel.PFNames) > 0 && !anyIn(s.sel.PFNames, s.pfNames(d)) {
		return false
	}
	if len(s.sel.LinkTypes) > 0 && !anyIn(s.sel.LinkTypes, s.linkTypes(d)) {
		return false
	}
	return true
}

// pfNames are the netdev names of the device's PF, or its own for a PF.
func (s *Source) pfNames(d *sysfs.Device) []string {
	if d.PFAddress == "" {
		return d.NetDevs
	}
	pf, err := sysfs.Read(s.root, d.PFAddress)
	if err != nil {
		return nil
	}
	return pf.NetDevs
}

// linkTypes of the device's netdevs; a VF bound to vfio-pci has none, so its
// PF's count.
func (s *Source) linkTypes(d *sysfs.Device) []string {
	var out []string
	for _, n := range d.NetDevs {
		out = append(out, sysfs.LinkType(s.root, d.Address, n))
	}
	if len(out) == 0 && d.PFAddress != "" {
		if pf, err := sysfs.Read(s.root, d.PFAddress); err == nil {
			for _, n := range pf.NetDevs {
				out = append(out, sysfs.LinkType(s.root, pf.Address, n))
			}
		}
	}
	return out
}

func match(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }

func anyIn(list, vals []string) bool {
	for _, v := range vals {
		if slices.Contains(list, v) {
			return true
		}
	}
	return false
}

// device turns a sysfs device into a source device.
func device(d *sysfs.Device) source.Device {
	return source.Device{
		Device:   deviceplugin.Device{ID: d.Address, Healthy: true, NUMANode: d.NUMANode},
		Info:     Info(d),
		DevNodes: VFIONodes(d),
	}
}

// Info is the pci device-info of a device.
func Info(d *sysfs.Device) *devinfo.DeviceInfo {
	pci := &devinfo.PciDevice{PciAddress: d.Address, PfPciAddress: d.PFAddress}
	if len(d.RDMA) > 0 {
		pci.RdmaDevice = d.RDMA[0]
	}
	return &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version, Pci: pci}
}

// VFIONodes are the device nodes of a vfio-pci bound device.
func VFIONodes(d *sysfs.Device) []source.DevNode {
	if d.Driver != "vfio-pci" || d.IOMMUGroup == "" {
		return nil
	}
	group := filepath.Join("/dev/vfio", d.IOMMUGroup)
	return []source.DevNode{
		{HostPath: "/dev/vfio/vfio", ContainerPath: "/dev/vfio/vfio", Permissions: "rw"},
		{HostPath: group, ContainerPath: group, Permissions: "rw"},
	}
}

// withPFLink marks a VF unhealthy while its PF's link is down. A PF whose
// netdev the host does not see (moved into a pod, or none) says nothing.
func (s *Source) withPFLink(dev source.Device, d *sysfs.Device) source.Device {
	if d.PFAddress == "" {
		return dev
	}
	pf, err := sysfs.Read(s.root, d.PFAddress)
	if err != nil {
		return dev
	}
	for _, n := range pf.NetDevs {
		if state := sysfs.OperState(s.root, pf.Address, n); state == "down" || state == "lowerlayerdown" {
			return source.Unhealthy(dev, fmt.Sprintf("PF %s link %s", n, state))
		}
	}
	return dev
}
