// Package pci is the device source that finds network PCI devices (PFs and
// VFs) in sysfs for one resource, selected with the SR-IOV network device
// plugin's selectors (see Selectors). The device ID is the PCI address. A PF
// with VFs configured is left out: its VFs are the devices. A container
// gets what its device needs: /dev/vfio/vfio and the IOMMU group's node for
// a vfio-pci bound device, the RDMA char devices when the resource asks for
// RDMA, /dev/vhost-net and /dev/net/tun when it asks for vhost-net, the
// vhost-vdpa node of a vhost vDPA device. A pool of auxiliary devices
// (Pool.Aux, the SR-IOV device plugin's auxNetDevice) serves instead the
// subfunctions that sit on network functions, by their name (aux.go).
//
// Health: a device stays in sysfs while a CNI plugin moves its netdev into a
// pod (only the netdev changes namespace), so in-use devices stay Healthy. A
// device that leaves sysfs (hot unplug, VFs removed) becomes Unhealthy and
// Gone: netdev-dp keeps it listed (with its files) while a pod holds it and
// drops it, forgetting it here, once none does; it becomes Healthy again if
// it returns first. A VF whose PF's link is down (the PF's netdev
// has operstate "down" or "lowerlayerdown") is Unhealthy until the link is
// up again: no traffic leaves the VF meanwhile. A PF device's own link state
// does not count: an unused PF is often down until a pod sets it up.
package pci

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
	"github.com/devplumb/devplumb/pkg/netdev/source/vdpa"
)

// Pool is what one resource selects, in the terms of the SR-IOV network
// device plugin's config: netdev-dp's own "pci" resource is a Pool of one
// network selector.
type Pool struct {
	// Accelerator selects processing accelerators (PCI class 0x12), every
	// one (a PF with VFs too), without device-info; else network functions
	// (class 0x02) other than PFs with VFs configured.
	Accelerator bool
	// Selectors are tried in order: a device belongs to the pool when one
	// selects it, and the first that does says what the container gets.
	Selectors []Selectors
	// ExcludeTopology reports no NUMA node for the devices.
	ExcludeTopology bool
	// Aux selects the auxiliary devices (subfunctions) that sit on network
	// PCI functions instead of the functions: its selectors need AuxTypes.
	Aux bool
	// Taken are the pools of the resources before this one: a device one
	// of them selects is theirs, never this pool's.
	Taken []Pool
}

// rule is one selector with its PF entries parsed.
type rule struct {
	sel                  Selectors
	pfNames, rootDevices []pfEntry
}

// Source is the PCI source of one resource.
type Source struct {
	root  string
	pool  Pool
	rules []rule
	taken []*Source // the earlier pools, to test devices against

	mu    sync.Mutex
	known map[string]source.Device // devices seen, kept when they leave sysfs
}

// New checks sel and returns a source reading sysfs under root ("" means /sys).
func New(root string, sel Selectors) (*Source, error) {
	return NewPool(root, Pool{Selectors: []Selectors{sel}})
}

// NewPool checks every selector of p and returns its source reading sysfs
// under root ("" means /sys).
func NewPool(root string, p Pool) (*Source, error) {
	if root == "" {
		root = sysfs.DefaultRoot
	}
	if len(p.Selectors) == 0 {
		return nil, fmt.Errorf("pci source: no selectors")
	}
	if p.Aux && p.Accelerator {
		return nil, fmt.Errorf("pci source: a pool of auxiliary devices holds no accelerators")
	}
	s := &Source{root: root, pool: p, known: map[string]source.Device{}}
	for i, sel := range p.Selectors {
		err := sel.Validate()
		if err == nil {
			err = sel.validateAux(p.Aux)
		}
		if err != nil && len(p.Selectors) > 1 {
			return nil, fmt.Errorf("selectors[%d]: %w", i, err)
		} else if err != nil {
			return nil, err
		}
		r := rule{sel: sel}
		r.pfNames, _ = parsePFList(sel.PFNames) // Validate parsed them
		r.rootDevices, _ = parsePFList(sel.RootDevices)
		s.rules = append(s.rules, r)
	}
	for _, t := range p.Taken {
		ts, err := NewPool(root, Pool{Accelerator: t.Accelerator, Aux: t.Aux, Selectors: t.Selectors})
		if err != nil {
			return nil, fmt.Errorf("an earlier resource's %w", err)
		}
		s.taken = append(s.taken, ts)
	}
	return s, nil
}

// Kind is "pci".
func (s *Source) Kind() string { return "pci" }

// Forget drops devices that left sysfs and that no pod holds (source.Forgetter).
func (s *Source) Forget(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	source.ForgetGone(s.known, ids)
}

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
		if s.pool.Aux {
			if err := s.scanAux(d, found); err != nil {
				return nil, err
			}
		} else if r := s.selected(candidate{fn: d}); r != nil {
			found[addr] = s.withPFLink(s.device(d, r), d.PFAddress)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	why, exists := "PCI function gone from sysfs", func(addr string) bool { return sysfs.Exists(s.root, addr) }
	if s.pool.Aux {
		why, exists = "auxiliary device gone from sysfs", func(name string) bool { return sysfs.AuxExists(s.root, name) }
	}
	out := source.KeepGone(s.known, found, why, func(id string) bool { return !exists(id) })
	s.known = found
	return out, nil
}

// candidate is what selectors are matched against: a PCI function, or an
// auxiliary device with the function it sits on.
type candidate struct {
	fn  *sysfs.Device
	aux *sysfs.AuxDevice // nil for a PCI function
}

// selected is the first rule that selects c, nil when none does or an
// earlier pool has it.
func (s *Source) selected(c candidate) *rule {
	r := s.firstRule(c)
	if r == nil {
		return nil
	}
	for i := range s.taken {
		if s.taken[i].firstRule(c) != nil {
			return nil
		}
	}
	return r
}

func (s *Source) firstRule(c candidate) *rule {
	d := c.fn
	switch {
	case s.pool.Aux != (c.aux != nil):
		return nil
	case s.pool.Aux:
		if !d.IsNetwork() {
			return nil
		}
	case s.pool.Accelerator != strings.HasPrefix(d.Class, "12") || (!s.pool.Accelerator && (!d.IsNetwork() || d.NumVFs > 0)):
		return nil
	}
	for i := range s.rules {
		if s.matches(&s.rules[i], c) {
			return &s.rules[i]
		}
	}
	return nil
}

func (s *Source) matches(r *rule, c candidate) bool {
	d := c.fn
	if !match(r.sel.Vendors, d.Vendor) || !match(r.sel.Devices, d.DeviceID) || !match(r.sel.Drivers, d.Driver) {
		return false
	}
	if c.aux != nil {
		return s.matchesAux(r, d, c.aux)
	}
	if !match(r.sel.PCIAddresses, d.Address) || !match(r.sel.ACPIIndexes, d.ACPIIndex) {
		return false
	}
	if len(r.pfNames) > 0 && (d.PFAddress == "" || !selects(r.pfNames, s.pfNetDevs(d), d.VFIndex)) {
		return false
	}
	if len(r.rootDevices) > 0 && (d.PFAddress == "" || !selects(r.rootDevices, []string{d.PFAddress}, d.VFIndex)) {
		return false
	}
	if len(r.sel.LinkTypes) > 0 && !anyIn(r.sel.LinkTypes, s.linkTypes(d)) {
		return false
	}
	if r.sel.IsRDMA && len(d.RDMA) == 0 {
		return false
	}
	return r.sel.VDPAType == "" || s.vdpa(d, r.sel.VDPAType) != nil
}

// pfNetDevs are the netdev names of a VF's PF.
func (s *Source) pfNetDevs(d *sysfs.Device) []string {
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

// device turns a sysfs device into a source device: the pci device-info
// (vdpa for a vdpaType rule, none for an accelerator) and the device nodes
// the rule asks for.
func (s *Source) device(d *sysfs.Device, r *rule) source.Device {
	dev := source.Device{
		Device:   deviceplugin.Device{ID: d.Address, Healthy: true, NUMANode: d.NUMANode},
		Info:     Info(d),
		DevNodes: append(VFIONodes(d), uioNodes(d)...),
	}
	if s.pool.ExcludeTopology {
		dev.NUMANode = deviceplugin.NoNUMA
	}
	if s.pool.Accelerator {
		dev.Info = nil
	}
	if r.sel.IsRDMA {
		dev.DevNodes = append(dev.DevNodes, rdmaNodes(s.root, d.RDMA)...)
	}
	if r.sel.NeedVhostNet {
		dev.DevNodes = append(dev.DevNodes, vhostNetNodes(s.root)...)
	}
	if v := s.vdpa(d, r.sel.VDPAType); v != nil {
		dev.Info, dev.DevNodes = v.Info, append(dev.DevNodes, v.DevNodes...)
	}
	return dev
}

// vhostNetNodes are /dev/vhost-net and /dev/net/tun when the host has both
// (misc devices vhost-net and tun, as the SR-IOV device plugin requires),
// else none: a container cannot start with a node the host lacks.
func vhostNetNodes(root string) []source.DevNode {
	for _, misc := range []string{"vhost-net", "tun"} {
		if _, err := os.Stat(filepath.Join(root, "class", "misc", misc)); err != nil {
			return nil
		}
	}
	return []source.DevNode{rw("/dev/vhost-net"), rw("/dev/net/tun")}
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
	return []source.DevNode{rw("/dev/vfio/vfio"), rw(filepath.Join("/dev/vfio", d.IOMMUGroup))}
}

// uioNodes is the /dev/uioN node of a device bound to a UIO driver.
func uioNodes(d *sysfs.Device) []source.DevNode {
	if d.UIO == "" {
		return nil
	}
	return []source.DevNode{rw("/dev/" + d.UIO)}
}

// RDMANodes are the /dev/infiniband nodes of the device's RDMA devices.
func RDMANodes(root string, d *sysfs.Device) []source.DevNode { return rdmaNodes(root, d.RDMA) }

// rdmaNodes are the /dev/infiniband nodes of RDMA devices ibdevs.
func rdmaNodes(root string, ibdevs []string) []source.DevNode {
	var out []source.DevNode
	for _, ibdev := range ibdevs {
		for _, n := range sysfs.RDMACharDevices(root, ibdev) {
			if !slices.ContainsFunc(out, func(x source.DevNode) bool { return x.HostPath == n }) {
				out = append(out, rw(n))
			}
		}
	}
	return out
}

// rw is host node path at the same path in the container, read-write.
func rw(path string) source.DevNode {
	return source.DevNode{HostPath: path, ContainerPath: path, Permissions: "rw"}
}

// vdpa is the device's vDPA device bound to driver typ ("vhost",
// "virtio"), nil when it has none or typ is "".
func (s *Source) vdpa(d *sysfs.Device, typ string) *source.Device {
	if typ == "" {
		return nil
	}
	for _, v := range vdpa.OnPCI(s.root, d.Address) {
		if v.Info.Vdpa.Driver == typ {
			return &v
		}
	}
	return nil
}

// withPFLink marks a VF unhealthy while its PF's link is down. A PF whose
// netdev the host does not see (moved into a pod, or none) says nothing.
func (s *Source) withPFLink(dev source.Device, pfAddr string) source.Device {
	if pfAddr == "" {
		return dev
	}
	pf, err := sysfs.Read(s.root, pfAddr)
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
