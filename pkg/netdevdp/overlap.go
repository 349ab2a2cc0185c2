package netdevdp

import (
	"fmt"
	"slices"
	"strings"

	"github.com/devplumb/devplumb/pkg/devpool"
)

// checkOverlap refuses a config in which one device is selected by two
// resources: the kubelet would count it twice and could give it to two pods
// at once. Devices are compared by what they are on the host (PCI address,
// socket path), so a PCI-backed netdev and its PCI function collide too.
func checkOverlap(resources []*resource) error {
	owner := map[string]string{}
	var errs []string
	for _, r := range resources {
		r.mu.Lock()
		devs := r.devices
		kind := r.pool.Kind()
		r.mu.Unlock()
		ids := make([]string, 0, len(devs))
		for id := range devs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			key := identity(kind, devs[id])
			if other, taken := owner[key]; taken && other != r.name {
				errs = append(errs, fmt.Sprintf("%s and %s both select %s", other, r.name, key))
				continue
			}
			owner[key] = r.name
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("resources overlap (a device would be given to two pods at once; make the selectors disjoint): %s",
			strings.Join(errs, "; "))
	}
	return nil
}

// identity names the host object behind a device.
func identity(kind string, d devpool.Device) string {
	switch {
	case d.Info != nil && d.Info.Pci != nil && d.Info.Pci.PciAddress != "":
		return "PCI device " + d.Info.Pci.PciAddress
	case d.Info != nil && d.Info.VhostUser != nil:
		return "socket " + d.Info.VhostUser.Path
	case d.Info != nil && d.Info.Memif != nil:
		return "socket " + d.Info.Memif.Path
	}
	return kind + " device " + d.ID
}
