// Package vdpa is the device source that finds vDPA devices under
// <sysfs>/bus/vdpa/devices for one resource, selected by name glob and
// driver ("vhost" for vhost_vdpa, "virtio" for virtio_vdpa). The device ID
// is the vDPA device name (vdpa0). A vhost-vdpa device gives the container
// its /dev/vhost-vdpa-N node; a virtio-vdpa device is a kernel netdev and
// needs no node.
//
// Health: a device that leaves sysfs becomes Unhealthy and Gone: netdev-dp
// keeps it listed while a pod holds it and drops it (Forget) once none does;
// it becomes Healthy again if it returns first.
package vdpa

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
)

// Selectors choose devices; empty lists match everything.
type Selectors struct {
	Names   []string `json:"names,omitempty"`   // globs of vDPA device names
	Drivers []string `json:"drivers,omitempty"` // "vhost", "virtio"
}

// Source is the vDPA source of one resource.
type Source struct {
	root string
	sel  Selectors

	mu    sync.Mutex
	known map[string]source.Device
}

// New checks the selectors and returns a source reading sysfs under root.
func New(root string, sel Selectors) (*Source, error) {
	if root == "" {
		root = sysfs.DefaultRoot
	}
	for _, g := range sel.Names {
		if _, err := filepath.Match(g, ""); err != nil {
			return nil, fmt.Errorf("vdpa source: bad name glob %q: %w", g, err)
		}
	}
	for _, d := range sel.Drivers {
		if d != devinfo.VdpaDriverVhost && d != devinfo.VdpaDriverVirtio {
			return nil, fmt.Errorf("vdpa source: driver %q is not %q or %q", d, devinfo.VdpaDriverVhost, devinfo.VdpaDriverVirtio)
		}
	}
	return &Source{root: root, sel: sel, known: map[string]source.Device{}}, nil
}

// Kind is "vdpa".
func (s *Source) Kind() string { return "vdpa" }

// Forget drops devices that left sysfs and that no pod holds (source.Forgetter).
func (s *Source) Forget(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	source.ForgetGone(s.known, ids)
}

func (s *Source) devicesDir() string { return filepath.Join(s.root, "bus", "vdpa", "devices") }

// Scan lists the selected devices.
func (s *Source) Scan() ([]source.Device, error) {
	entries, err := os.ReadDir(s.devicesDir())
	if err != nil && !os.IsNotExist(err) { // no vdpa bus: no devices yet
		return nil, fmt.Errorf("vdpa source: %w", err)
	}
	found := map[string]source.Device{}
	for _, e := range entries {
		if d, ok := s.read(e.Name()); ok {
			found[d.ID] = d
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := source.KeepGone(s.known, found, "vDPA device gone from sysfs", func(name string) bool {
		_, err := os.Stat(filepath.Join(s.devicesDir(), name))
		return err != nil
	})
	s.known = found
	return out, nil
}

// read describes one vDPA device; ok is false when it is not selected or not
// bound to a vDPA bus driver.
func (s *Source) read(name string) (source.Device, bool) {
	if !s.nameSelected(name) {
		return source.Device{}, false
	}
	d, ok := describe(s.root, name)
	if !ok || (len(s.sel.Drivers) > 0 && !slices.Contains(s.sel.Drivers, d.Info.Vdpa.Driver)) {
		return source.Device{}, false
	}
	return d, true
}

// describe is vDPA device name as a source device; ok is false when it is
// not bound to a vDPA bus driver.
func describe(root, name string) (source.Device, bool) {
	dir := filepath.Join(root, "bus", "vdpa", "devices", name)
	driver, path, node := busDriver(dir)
	if driver == "" {
		return source.Device{}, false
	}
	info := &devinfo.VdpaDevice{ParentDevice: name, Driver: driver, Path: path}
	d := source.Device{Device: deviceplugin.Device{ID: name, Healthy: true, NUMANode: deviceplugin.NoNUMA}}
	if parent := pciParent(dir); parent != "" {
		info.PciAddress = parent
		if pd, err := sysfs.Read(root, parent); err == nil {
			info.PfPciAddress = pd.PFAddress
			d.NUMANode = pd.NUMANode
		}
	}
	d.Info = &devinfo.DeviceInfo{Type: devinfo.TypeVDPA, Version: devinfo.Version, Vdpa: info}
	if node != "" {
		d.DevNodes = []source.DevNode{{HostPath: node, ContainerPath: node, Permissions: "rw"}}
	}
	return d, true
}

// pciParent is the PCI address of the function a vDPA device sits on, else
// "".
func pciParent(dir string) string {
	target, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return ""
	}
	if parent := filepath.Base(filepath.Dir(target)); sysfs.IsAddress(parent) {
		return parent
	}
	return ""
}

// OnPCI lists the vDPA devices bound to a vDPA bus driver that sit on PCI
// function addr, sorted by name.
func OnPCI(root, addr string) []source.Device {
	entries, _ := os.ReadDir(filepath.Join(root, "bus", "vdpa", "devices"))
	var out []source.Device
	for _, e := range entries {
		if pciParent(filepath.Join(root, "bus", "vdpa", "devices", e.Name())) != addr {
			continue
		}
		if d, ok := describe(root, e.Name()); ok {
			out = append(out, d)
		}
	}
	return out
}

func (s *Source) nameSelected(name string) bool {
	if len(s.sel.Names) == 0 {
		return true
	}
	for _, g := range s.sel.Names {
		if ok, _ := filepath.Match(g, name); ok {
			return true
		}
	}
	return false
}

// busDriver returns the spec's driver name, the device-info path and, for
// vhost, the device node.
func busDriver(dir string) (driver, path, node string) {
	target, err := os.Readlink(filepath.Join(dir, "driver"))
	if err != nil {
		return "", "", ""
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		n := e.Name()
		switch {
		case filepath.Base(target) == "vhost_vdpa" && strings.HasPrefix(n, "vhost-vdpa-"):
			return devinfo.VdpaDriverVhost, "/dev/" + n, "/dev/" + n
		case filepath.Base(target) == "virtio_vdpa" && strings.HasPrefix(n, "virtio"):
			return devinfo.VdpaDriverVirtio, "/sys/bus/virtio/devices/" + n, ""
		}
	}
	return "", "", ""
}
