package dpmode

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// Owners records which resource advertises each host device. One device
// selected by two resources would be counted twice by the kubelet and could
// go to two pods at once; so a device goes to the resource that had it
// first, and the others leave it out (at start that is a config error, see
// conflictsAtStart; later, when a device appears under two resources, an
// error is logged). Devices are compared by what they are on the host (PCI
// address, socket path), so a PCI-backed netdev and its PCI function collide.
type Owners struct {
	mu sync.Mutex
	by map[string]string // identity -> resource name
}

func NewOwners() *Owners { return &Owners{by: map[string]string{}} }

// Claim returns the devices of res that no other resource advertises and a
// description of each one left out. Devices res no longer lists are released.
func (o *Owners) Claim(res, kind string, devs []source.Device) (kept []source.Device, conflicts []string) {
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

// conflictsAtStart fails the start when resources overlap: with devices that
// exist already, that is a config to fix, not something to run with.
func conflictsAtStart(resources []*resource) error {
	var all []string
	for _, r := range resources {
		r.mu.Lock()
		all = append(all, r.conflicts...)
		r.mu.Unlock()
	}
	if len(all) > 0 {
		return fmt.Errorf("resources overlap (a device would be given to two pods at once; make the selectors disjoint): %s",
			strings.Join(all, "; "))
	}
	return nil
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
