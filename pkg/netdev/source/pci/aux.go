package pci

import (
	"fmt"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
)

// AuxTypeSF is the one auxiliary device type served: subfunctions
// (mlx5_core.sf.N), as the SR-IOV device plugin serves.
const AuxTypeSF = "sf"

// validateAux checks the selector against its pool's kind: auxTypes are
// required for auxiliary devices (the SR-IOV device plugin requires them)
// and only "sf", and the selectors of PCI functions alone do not apply;
// auxTypes select nothing among PCI functions.
func (sel Selectors) validateAux(aux bool) error {
	if !aux {
		if len(sel.AuxTypes) > 0 {
			return fmt.Errorf("pci source: auxTypes select auxiliary devices, not PCI functions")
		}
		return nil
	}
	if len(sel.AuxTypes) == 0 {
		return fmt.Errorf("pci source: auxTypes: required for auxiliary devices, like [\"sf\"]")
	}
	for _, t := range sel.AuxTypes {
		if t != AuxTypeSF {
			return fmt.Errorf("pci source: auxTypes: %q: only %q (subfunctions) is served", t, AuxTypeSF)
		}
	}
	for _, n := range []struct {
		name string
		set  bool
	}{{"pciAddresses", len(sel.PCIAddresses) > 0}, {"acpiIndexes", len(sel.ACPIIndexes) > 0}, {"vdpaType", sel.VDPAType != ""}} {
		if n.set {
			return fmt.Errorf("pci source: %s: selects PCI functions, not auxiliary devices", n.name)
		}
	}
	return nil
}

// scanAux adds to found the selected auxiliary devices on network function
// d: those the auxiliary bus lists with d as their parent.
func (s *Source) scanAux(d *sysfs.Device, found map[string]source.Device) error {
	if !d.IsNetwork() {
		return nil
	}
	for _, name := range sysfs.AuxOf(s.root, d.Address) {
		a, err := sysfs.ReadAux(s.root, name)
		if err != nil {
			if sysfs.ErrNotExist(err) {
				continue // removed while we looked
			}
			return fmt.Errorf("pci source: %w", err)
		}
		if r := s.selected(candidate{fn: d, aux: a}); r != nil {
			found[name] = s.withPFLink(s.auxDevice(d, a, r), d.Address)
		}
	}
	return nil
}

// matchesAux matches the selectors of auxiliary devices (vendors, devices
// and drivers are the parent function's, checked before): auxTypes;
// pfNames and rootDevices by the parent's netdev names and address, the
// ranges counting subfunction numbers (sfnum), as the SR-IOV device
// plugin; linkTypes of its netdev (else the parent's); isRdma. An SF
// without its sfnum is not served (that plugin drops it too).
func (s *Source) matchesAux(r *rule, fn *sysfs.Device, a *sysfs.AuxDevice) bool {
	if !match(r.sel.AuxTypes, a.Type) || a.SFNum < 0 {
		return false
	}
	if len(r.pfNames) > 0 && !selects(r.pfNames, fn.NetDevs, a.SFNum) {
		return false
	}
	if len(r.rootDevices) > 0 && !selects(r.rootDevices, []string{fn.Address}, a.SFNum) {
		return false
	}
	if len(r.sel.LinkTypes) > 0 && !anyIn(r.sel.LinkTypes, s.auxLinkTypes(fn, a)) {
		return false
	}
	return !r.sel.IsRDMA || len(a.RDMA) > 0
}

func (s *Source) auxLinkTypes(fn *sysfs.Device, a *sysfs.AuxDevice) []string {
	var out []string
	for _, n := range a.NetDevs {
		out = append(out, sysfs.AuxLinkType(s.root, a.Name, n))
	}
	if len(out) == 0 {
		for _, n := range fn.NetDevs {
			out = append(out, sysfs.LinkType(s.root, fn.Address, n))
		}
	}
	return out
}

// auxDevice is an auxiliary device as a source device: its name as ID, its
// parent's NUMA node, no device-info (the Device Information spec has no
// type for it, and the SR-IOV device plugin writes none), the RDMA nodes
// and vhost-net its rule asks for.
func (s *Source) auxDevice(fn *sysfs.Device, a *sysfs.AuxDevice, r *rule) source.Device {
	dev := source.Device{
		Device: deviceplugin.Device{ID: a.Name, Healthy: true, NUMANode: fn.NUMANode},
		Aux:    &source.Aux{Parent: fn.Address},
	}
	if len(a.RDMA) > 0 {
		dev.Aux.RDMADevice = a.RDMA[0]
	}
	if s.pool.ExcludeTopology {
		dev.NUMANode = deviceplugin.NoNUMA
	}
	if r.sel.IsRDMA {
		dev.DevNodes = append(dev.DevNodes, rdmaNodes(s.root, a.RDMA)...)
	}
	if r.sel.NeedVhostNet {
		dev.DevNodes = append(dev.DevNodes, vhostNetNodes(s.root)...)
	}
	return dev
}
