package kubeletsim

import (
	"context"
	"fmt"
	"slices"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Device is one device a plugin advertises.
type Device struct {
	ID string `json:"id"`
	// Health is pluginapi.Healthy or pluginapi.Unhealthy. A broken stream
	// makes every device of the resource Unhealthy until the plugin registers
	// again, or until the grace period drops them.
	Health    string  `json:"health"`
	NUMANodes []int64 `json:"numaNodes,omitempty"`
}

// Healthy reports whether the device may be allocated.
func (d Device) Healthy() bool { return d.Health == pluginapi.Healthy }

// CountHealthy is how many of devs are healthy.
func CountHealthy(devs []Device) int {
	n := 0
	for _, d := range devs {
		if d.Healthy() {
			n++
		}
	}
	return n
}

// watch follows the plugin's ListAndWatch stream until it breaks or the
// endpoint is stopped (replaced, or the node stops).
func (n *Node) watch(ep *endpoint) {
	stream, err := ep.client.ListAndWatch(ep.ctx, &pluginapi.Empty{})
	for err == nil {
		var resp *pluginapi.ListAndWatchResponse
		if resp, err = stream.Recv(); err == nil {
			n.updateDevices(ep, resp.GetDevices())
		}
	}
	if ep.ctx.Err() != nil {
		return // stopped on purpose
	}
	n.mu.Lock()
	if !ep.tracked {
		// Kubelet 1.37 no longer knows this client after refusing a second
		// registration of its socket: nothing disconnects it, so the endpoint
		// and its devices stay as they were and its connection stays open.
		n.mu.Unlock()
		n.log.Error("ListAndWatch ended unexpectedly for device plugin", "resource", ep.resource, "socket", ep.socket, "err", err)
		return
	}
	if key := (sockKey{ep.resource, ep.socket}); n.sockets[key] == ep {
		delete(n.sockets, key)
	}
	current := n.endpoints[ep.resource] == ep
	if current {
		delete(n.endpoints, ep.resource)
		devs := n.devices[ep.resource]
		for i := range devs {
			devs[i].Health = pluginapi.Unhealthy
		}
		n.scheduleExpiryLocked(ep.resource)
		n.notifyLocked()
	}
	n.mu.Unlock()
	ep.stop()
	if current {
		n.log.Error("Device plugin ListAndWatch stream broken, marking its devices unhealthy until it registers again",
			"resource", ep.resource, "socket", ep.socket, "gracePeriod", n.grace, "err", err)
	}
}

// scheduleExpiryLocked drops the devices of res after the grace period unless
// a plugin registers for res before; n.mu must be held.
func (n *Node) scheduleExpiryLocked(res string) {
	n.cancelExpiryLocked(res)
	e := &expiry{}
	e.timer = time.AfterFunc(n.grace, func() { n.expire(res, e) })
	n.expiry[res] = e
}

// expiry is one pending removal of a dead plugin's devices; the timer field
// is set under n.mu before the callback can look at it.
type expiry struct{ timer *time.Timer }

// cancelExpiryLocked stops a pending expiry of res; n.mu must be held.
func (n *Node) cancelExpiryLocked(res string) {
	if e := n.expiry[res]; e != nil {
		e.timer.Stop()
		delete(n.expiry, res)
	}
}

// expire removes the resource of a plugin that did not come back within the
// grace period, as the kubelet removes it from the node's capacity.
func (n *Node) expire(res string, e *expiry) {
	n.mu.Lock()
	if n.expiry[res] != e || n.endpoints[res] != nil || n.ctx.Err() != nil {
		n.mu.Unlock()
		return // cancelled, re-registered or stopping
	}
	delete(n.expiry, res)
	dropped := len(n.devices[res])
	delete(n.devices, res)
	n.notifyLocked()
	n.mu.Unlock()
	n.log.Warn("Device plugin did not come back within the grace period, removing its devices",
		"resource", res, "devices", dropped, "gracePeriod", n.grace)
}

// updateDevices records a ListAndWatch answer, in the plugin's order, and logs
// health changes the way a kubelet operator would want to see them.
func (n *Node) updateDevices(ep *endpoint, list []*pluginapi.Device) {
	devs := make([]Device, 0, len(list))
	for _, d := range list {
		if d.GetID() == "" {
			n.log.Warn("Device plugin sent a device without ID, ignoring it", "resource", ep.resource)
			continue
		}
		h := pluginapi.Unhealthy
		if d.GetHealth() == pluginapi.Healthy {
			h = pluginapi.Healthy
		}
		var numa []int64
		for _, nn := range d.GetTopology().GetNodes() {
			numa = append(numa, nn.GetID())
		}
		devs = append(devs, Device{ID: d.GetID(), Health: h, NUMANodes: numa})
	}
	n.mu.Lock()
	if n.endpoints[ep.resource] != ep {
		n.mu.Unlock()
		return // a stale stream of a replaced endpoint
	}
	old := n.devices[ep.resource]
	n.devices[ep.resource] = devs
	ep.listed = true
	n.notifyLocked()
	n.mu.Unlock()
	n.logChanges(ep.resource, old, devs)
}

func (n *Node) logChanges(res string, old, cur []Device) {
	was := map[string]string{}
	for _, d := range old {
		was[d.ID] = d.Health
	}
	for _, d := range cur {
		prev, known := was[d.ID]
		switch {
		case d.Health == pluginapi.Unhealthy && prev != pluginapi.Unhealthy:
			n.log.Warn("Device unhealthy", "resource", res, "device", d.ID)
		case d.Healthy() && known && prev != pluginapi.Healthy:
			n.log.Info("Device healthy again", "resource", res, "device", d.ID)
		}
		delete(was, d.ID)
	}
	for id := range was {
		n.log.Info("Device removed by plugin", "resource", res, "device", id)
	}
	n.log.Info("Device plugin updated devices", "resource", res, "devices", len(cur), "healthy", CountHealthy(cur))
}

// Resources returns what plugins advertise, per resource name, in each
// plugin's order, with health and NUMA nodes.
func (n *Node) Resources() map[string][]Device {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string][]Device, len(n.devices))
	for res, devs := range n.devices {
		out[res] = cloneDevices(devs)
	}
	return out
}

func cloneDevices(devs []Device) []Device {
	out := slices.Clone(devs)
	for i := range out {
		out[i].NUMANodes = slices.Clone(out[i].NUMANodes)
	}
	return out
}

// Registered reports whether a plugin for res is registered and has sent its
// first device list.
func (n *Node) Registered(res string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep := n.endpoints[res]
	return ep != nil && ep.listed
}

// WaitRegistered waits until a plugin for res is registered and has sent its
// first device list. After a node restart it waits for the re-registration.
func (n *Node) WaitRegistered(ctx context.Context, res string) error {
	err := n.wait(ctx, func() bool { return n.Registered(res) })
	if err != nil {
		return fmt.Errorf("waiting for device plugin %s to register: %w", res, err)
	}
	return nil
}

// WaitResources waits until cond holds for Resources(); tests use it to wait
// for a health change to arrive. cond may call the Node's methods.
func (n *Node) WaitResources(ctx context.Context, cond func(map[string][]Device) bool) error {
	return n.wait(ctx, func() bool { return cond(n.Resources()) })
}

// wait re-checks cond (called without n.mu) after every change.
func (n *Node) wait(ctx context.Context, cond func() bool) error {
	for {
		// Taken before cond runs: a change while it runs closes ch.
		n.mu.Lock()
		ch := n.changed
		n.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.ctx.Done():
			return fmt.Errorf("node stopped")
		case <-ch:
		}
	}
}
