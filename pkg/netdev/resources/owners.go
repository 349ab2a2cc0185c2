package resources

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// Owners records which resource advertises each host device. One device
// selected by two resources would be counted twice by the kubelet and could
// go to two pods at once; so a device is assigned to the resource that had
// it first, and the others leave it out (at start that is a config error, see
// OverlapError; later, when a device appears under two resources, an error is
// logged). Devices are compared by what they are on the host (PCI
// address, socket path), so a PCI-backed netdev and its PCI function collide.
type Owners struct {
	mu sync.Mutex
	by map[string]string // identity -> resource name
}

// NewOwners returns an empty record, one for all resources of a run.
func NewOwners() *Owners { return &Owners{by: map[string]string{}} }

// Assign returns the devices of res that no other resource advertises and a
// description of each one left out. Devices res no longer lists are released.
func (o *Owners) Assign(res, kind string, devs []source.Device) (kept []source.Device, conflicts []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, owner := range o.by {
		if owner == res {
			delete(o.by, key)
		}
	}
	for _, d := range devs {
		key := identity(kind, d)
		if other, taken := o.by[key]; taken {
			conflicts = append(conflicts, fmt.Sprintf("%s and %s both select %s", other, res, key))
			continue
		}
		o.by[key] = res
		kept = append(kept, d)
	}
	return kept, conflicts
}

// OverlapError fails a start when resources overlap (conflicts as Assign
// reported them): with devices that exist already, that is a config to fix,
// not something to run with. holders says what a device would be given to
// twice ("pods", "claims").
func OverlapError(conflicts []string, holders string) error {
	if len(conflicts) == 0 {
		return nil
	}
	return fmt.Errorf("resources overlap (a device would be given to two %s at once; make the selectors disjoint): %s",
		holders, strings.Join(conflicts, "; "))
}

// identity names the host object behind a device.
func identity(kind string, d source.Device) string {
	switch {
	case d.Info != nil && d.Info.Pci != nil && d.Info.Pci.PciAddress != "":
		return "PCI device " + d.Info.Pci.PciAddress
	case d.Info != nil && d.Info.VhostUser != nil:
		return "socket " + realPath(d.Info.VhostUser.Path)
	case d.Info != nil && d.Info.Memif != nil:
		return "socket " + realPath(d.Info.Memif.Path)
	}
	return kind + " device " + d.ID
}

// realPath is path with every link resolved, so two resources whose socket
// directories are a link and its target (or two links to one directory) are
// seen to share their sockets. The socket itself may not exist yet (a
// server-mode socket is made by the pod), so its directory is resolved; if
// that fails too, the path is taken as it is.
func realPath(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		return filepath.Join(dir, filepath.Base(path))
	}
	return path
}
