package dpmode

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/devplumb/devplumb/podresources"
)

// heldTimeout bounds asking the kubelet at stop: a DaemonSet's pod has 30
// seconds (terminationGracePeriodSeconds) between SIGTERM and SIGKILL.
const heldTimeout = 5 * time.Second

// held is the devices pods hold, by resource name and device ID.
type held map[string]map[string]bool

// heldDevices asks the kubelet's PodResources API (at socket, "" for its
// default) which devices pods hold: the kubelet records a device for a pod at
// Allocate and forgets it only when the pod is gone, so these are the devices
// whose device-info files and CDI spec entries a pod may still need (a CNI
// ADD in a pod sandbox, a container restart resolving CDI names).
func heldDevices(socket string, log *slog.Logger) (held, error) {
	c, err := podresources.New(socket, podresources.WithTimeout(heldTimeout), podresources.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("ask the kubelet which devices pods hold: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), heldTimeout)
	defer cancel()
	pods, err := c.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("ask the kubelet at %s which devices pods hold: %w", c.Socket(), err)
	}
	out := held{}
	for _, p := range pods {
		for _, ctr := range p.GetContainers() {
			for _, d := range ctr.GetDevices() {
				if out[d.GetResourceName()] == nil {
					out[d.GetResourceName()] = map[string]bool{}
				}
				for _, id := range d.GetDeviceIds() {
					out[d.GetResourceName()][id] = true
				}
			}
		}
	}
	return out, nil
}

// cleanup runs when the daemon stops (SIGTERM of a DaemonSet update, say),
// after the plugins stopped serving: it removes the device-info files and CDI
// spec entries of the devices no pod holds, and keeps those of the devices
// pods hold for the next instance to adopt. Removing those would break, until
// the next instance has started, a pod created meanwhile (its CNI ADD finds
// no device-info) and a restarted container (its CDI names do not resolve).
func cleanup(rs []*resource, podResourcesSocket string, log *slog.Logger) {
	h, err := heldDevices(podResourcesSocket, log)
	if err != nil {
		// Without the kubelet's answer no device is known to be free. Keeping
		// a free device's file costs nothing (the next instance adopts it, or
		// removes it once the device is gone); removing a held one breaks pods.
		log.Warn("keeping every device-info file and CDI spec: which devices pods hold is unknown", "err", err)
		return
	}
	for _, r := range rs {
		if err := r.cleanup(h[r.name]); err != nil {
			log.Error("cleanup", "resource", r.name, "err", err)
		}
	}
}
