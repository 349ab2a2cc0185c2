package adapter

import (
	"context"
	"time"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// shownSlots is the set of slots of resource name that PodResources shows
// on any pod.
func shownSlots(pods []*v1.PodResources, name string) map[string]bool {
	out := map[string]bool{}
	for _, p := range pods {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == name {
					for _, id := range d.GetDeviceIds() {
						out[id] = true
					}
				}
			}
		}
	}
	return out
}

// reconcile DELs the allocations no pod holds: those PodResources showed
// before and no longer shows, those it never showed within grace (the
// kubelet's admission failed after Allocate), and, in the first check after
// the adapter's start, every one made before that start that it does not
// show. Then it asks INFO again.
func (r *resource) reconcile(ctx context.Context, pods []*v1.PodResources, restoredBefore time.Time, grace time.Duration) {
	if ctx.Err() != nil { // stopping: a DEL now would be killed
		return
	}
	shown := shownSlots(pods, r.name)
	r.log.Debug("PodResources polled", "pods", len(pods), "slotsShown", len(shown))
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for id, a := range r.allocs {
		held := false
		for _, s := range a.Slots {
			held = held || shown[s]
		}
		switch {
		case held && !a.Seen:
			a.Seen, changed = true, true
		case held:
		case a.Seen || a.Created.Before(restoredBefore) || time.Since(a.Created) > grace:
			r.log.Info("no pod holds the allocation", "requestID", id, "slots", a.Slots)
			r.delLocked(ctx, id)
		}
	}
	if changed {
		if err := r.state.save(r.allocs); err != nil {
			r.log.Error("saving state", "err", err)
		}
	}
	r.refreshLocked(ctx)
}
