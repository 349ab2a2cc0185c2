package dramode

import (
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// dropFreeGone leaves out of r's scan the devices that left the host (Gone)
// and that no prepared claim holds, and tells the source to forget them: the
// slices stop publishing them, so no claim is allocated a device that is no
// more. A gone device a prepared claim holds stays published, tainted, and
// in the health stream as unhealthy, until the kubelet unprepares the claim;
// its claim's files are the claim's (prepare wrote them) and stay until then.
func (d *Driver) dropFreeGone(r *res, devs []source.Device) []source.Device {
	d.mu.Lock()
	held := d.preparedNames()
	d.mu.Unlock()
	var kept []source.Device
	var forget []string
	for _, dev := range devs {
		if dev.Gone && !held[DeviceName(r.name, dev.ID)] {
			forget = append(forget, dev.ID)
			d.log.Info("device left the host and no prepared claim holds it: unpublished", "resource", r.name, "device", dev.ID)
			continue
		}
		kept = append(kept, dev)
	}
	if f, ok := r.source.(source.Forgetter); ok && len(forget) > 0 {
		f.Forget(forget)
	}
	return kept
}

// preparedNames are the slice names of this pool's devices that prepared
// claims hold (a shareable device's once per share). Call with mu held.
func (d *Driver) preparedNames() map[string]bool {
	out := map[string]bool{}
	for _, rec := range d.prepared {
		for _, p := range rec.Devices {
			if p.Pool == d.pool {
				out[p.Name] = true
			}
		}
	}
	return out
}
