// Package source holds what every device source of netdev-dp reports about a
// device: its identity and health for the kubelet, the device-info it can be
// described with, and what a container needs to use it (device nodes,
// mounts). The sources live in the subpackages (pci, vdpa, socket, link);
// this package is their shared vocabulary and the Source interface they
// implement. ("Pool" is kept for DRA's ResourceSlice pools.)
package source

import (
	"context"
	"slices"
	"strings"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
)

// DevNode is a host device node a container needs (e.g. /dev/vfio/12).
type DevNode struct {
	HostPath      string
	ContainerPath string
	Permissions   string // cgroup permissions, e.g. "rw"
}

// Mount is a host path bind-mounted into the container (e.g. a socket dir).
type Mount struct {
	HostPath      string
	ContainerPath string
	ReadOnly      bool
}

// Device is one allocatable device of a source.
type Device struct {
	// ID, health and NUMA node (deviceplugin.NoNUMA when unknown), as
	// the kubelet sees them: one type for one thing.
	deviceplugin.Device
	Info     *devinfo.DeviceInfo // nil when no device-info type describes it
	DevNodes []DevNode
	Mounts   []Mount
	// Env is what the container gets besides the device's own variable
	// ("NAME=value"): a share's parent, ID and bandwidth.
	Env []string `json:",omitempty"`
	// Aux describes an auxiliary device (an SF), which has no device-info
	// to say it; nil for others.
	Aux *Aux `json:",omitempty"`
	// Reason says why Healthy is false ("interface deleted", "PF ens1f0
	// link down"), for logs and the DRA health stream; "" when healthy. A
	// prepared claim's checkpoint keeps the device as prepared, not its
	// later health, so it is not saved.
	Reason string `json:"-"`
	// Gone says the device has left the host (KeepGone): it is still
	// listed, unhealthy, only for the modes to decide whether a pod holds
	// it. They drop it when none does (and tell a Forgetter).
	Gone bool `json:"-"`
}

// Aux is what the SR-IOV device plugin's environment says of an auxiliary
// device besides its ID.
type Aux struct {
	Parent     string // the PCI function it sits on ("0000:03:00.0")
	RDMADevice string // its first RDMA device ("mlx5_3"), "" when none
}

// Source finds the devices of one resource.
type Source interface {
	// Scan returns the source's current devices. Devices that a source still
	// knows but cannot use are returned with Healthy false.
	Scan() ([]Device, error)
	// Kind names the source type ("pci", "netdevs", ...), used in env names.
	Kind() string
}

// Sort orders devices by ID, the order used in lists and files.
func Sort(devs []Device) {
	slices.SortFunc(devs, func(a, b Device) int { return strings.Compare(a.ID, b.ID) })
}

// Index maps devices by ID.
func Index(devs []Device) map[string]Device {
	m := make(map[string]Device, len(devs))
	for _, d := range devs {
		m[d.ID] = d
	}
	return m
}

// Notifier is implemented by sources that learn about changes as they happen
// (netlink, fsnotify); the caller rescans after each notification.
type Notifier interface {
	// Watch runs until ctx ends, calling changed after each change.
	Watch(ctx context.Context, changed func()) error
}

// Forgetter is a source that keeps the devices that left the host (Gone)
// until it is told to forget them: a mode forgets a gone device once no pod
// holds it, so that it is neither listed nor scanned again.
type Forgetter interface {
	Forget(ids []string)
}

// KeepVanished adds to found, as unhealthy for reason why, every device of
// known that the scan did not find and that vanished(id) says is gone (and
// not merely deselected): the kubelet must see a device it may have given to
// a pod turn unhealthy rather than disappear, and it stays so until it
// returns (a socket a restarting vswitch makes again). It returns found as a
// sorted list; found becomes the next known.
func KeepVanished(known, found map[string]Device, why string, vanished func(id string) bool) []Device {
	return keep(known, found, why, vanished, false)
}

// KeepGone is KeepVanished for hardware that has left the host (a PCI
// function, a vDPA device): the devices kept are also Gone, listed only for
// the modes to decide whether a pod holds them; they stay until they return
// or the mode forgets them (see Forgetter).
func KeepGone(known, found map[string]Device, why string, vanished func(id string) bool) []Device {
	return keep(known, found, why, vanished, true)
}

func keep(known, found map[string]Device, why string, vanished func(id string) bool, gone bool) []Device {
	for id, d := range known {
		if _, ok := found[id]; !ok && vanished(id) {
			d = Unhealthy(d, why)
			d.Gone = gone
			found[id] = d
		}
	}
	out := make([]Device, 0, len(found))
	for _, d := range found {
		out = append(out, d)
	}
	Sort(out)
	return out
}

// ForgetGone deletes from known the devices of ids that are still Gone: one
// back on the host since the scan that reported it gone is kept.
func ForgetGone(known map[string]Device, ids []string) {
	for _, id := range ids {
		if known[id].Gone {
			delete(known, id)
		}
	}
}

// Unhealthy is d marked unhealthy for reason why.
func Unhealthy(d Device, why string) Device {
	d.Healthy, d.Reason = false, why
	return d
}
