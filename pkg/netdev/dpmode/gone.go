package dpmode

import (
	"slices"

	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// dropFreeGone leaves out of a scan the devices that left the host (Gone)
// and that no pod holds, and tells the source to forget them: their
// device-info files and CDI spec entries go with them at this sync, and the
// kubelet stops listing them. A gone device a pod holds stays listed,
// unhealthy, with its files (the pod's CNI DEL, a restarted container may
// still need them), until the kubelet says its pod is gone. When the
// kubelet cannot say which devices pods hold, every gone device stays.
func (r *resource) dropFreeGone(devs []source.Device) []source.Device {
	if !slices.ContainsFunc(devs, func(d source.Device) bool { return d.Gone }) || r.held == nil {
		return devs
	}
	held, err := r.held()
	if err != nil {
		if !r.heldUnknown { // once, not at every rescan
			r.log.Warn("keeping the devices that left the host listed: which devices pods hold is unknown", "err", err)
		}
		r.heldUnknown = true
		return devs
	}
	r.heldUnknown = false
	var kept []source.Device
	var forget []string
	for _, d := range devs {
		switch {
		case !d.Gone:
			kept = append(kept, d)
		case held[d.ID]:
			kept = append(kept, d)
		default:
			forget = append(forget, d.ID)
			r.log.Info("device left the host and no pod holds it: removed", "device", d.ID)
		}
	}
	if f, ok := r.source.(source.Forgetter); ok && len(forget) > 0 {
		f.Forget(forget)
	}
	return kept
}
