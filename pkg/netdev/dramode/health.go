package dramode

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// The kubelet's health stream (DRAResourceHealth v1 on kubelet 1.37,
// v1alpha1 before; kubeletplugin serves both and hides which) carries the
// health the device sources report, the same the device-plugin mode sends
// in ListAndWatch. The kubelet shows it in the pod status
// (containerStatuses[].allocatedResourcesStatus) of the pods holding a
// device. A kubelet that does not watch (older, or ResourceHealthStatus off)
// simply never calls WatchHealthStatus.

// minHealthTimeout is the kubelet's default lease of a health report.
const minHealthTimeout = 30 * time.Second

// healthState is what the health stream needs of the syncs (guarded by mu).
type healthState struct {
	at     time.Time     // when the devices were last scanned
	synced chan struct{} // closed by the next sync
}

// scanned records a sync at t and wakes the health streams. Call with mu held.
func (d *Driver) scanned(t time.Time) {
	d.health.at = t
	if d.health.synced != nil {
		close(d.health.synced)
	}
	d.health.synced = make(chan struct{})
}

// healthTimeout is how long the kubelet trusts a report: a report goes out
// at every sync, at least every resync period, so three of them may be
// missed before the kubelet calls the health unknown (a stuck driver).
func (d *Driver) healthTimeout() time.Duration {
	return max(minHealthTimeout, 3*d.resync)
}

// WatchHealthStatus sends the health of every device, and of the devices of
// prepared claims that are gone, after every sync until ctx ends: at once,
// when a source changes, and every resync period, which keeps the reports
// fresh. A stuck sync sends none, and the kubelet's view decays to unknown.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	for {
		report, next := d.healthReport()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-next:
		}
	}
}

// healthReport is the current report and a channel closed by the next sync.
func (d *Driver) healthReport() (kubeletplugin.DeviceHealthReport, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.health.synced == nil {
		d.health.synced = make(chan struct{})
	}
	timeout := d.healthTimeout()
	var out []kubeletplugin.DeviceHealth
	for name, e := range d.devices {
		h := kubeletplugin.DeviceHealth{PoolName: d.pool, DeviceName: name, Health: kubeletplugin.HealthStatusHealthy,
			LastUpdated: d.health.at, HealthCheckTimeout: timeout}
		if !e.dev.Healthy {
			h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, e.dev.Reason
		}
		out = append(out, h)
	}
	// A prepared device no source lists any more (a moved veth whose pair
	// was destroyed, a resource taken out of the config): a pod may hold it.
	for _, rec := range d.prepared {
		for _, p := range rec.Devices {
			if _, listed := d.devices[p.Name]; !listed && p.Pool == d.pool {
				out = append(out, kubeletplugin.DeviceHealth{PoolName: p.Pool, DeviceName: p.Name, Health: kubeletplugin.HealthStatusUnhealthy,
					Message: "no longer found on the node", LastUpdated: d.health.at, HealthCheckTimeout: timeout})
			}
		}
	}
	slices.SortFunc(out, func(a, b kubeletplugin.DeviceHealth) int { return strings.Compare(a.DeviceName, b.DeviceName) })
	out = slices.CompactFunc(out, func(a, b kubeletplugin.DeviceHealth) bool { return a.DeviceName == b.DeviceName })
	return kubeletplugin.DeviceHealthReport{Devices: out}, d.health.synced
}

// checkTaintsDropped turns taints off when the API server drops them (a
// cluster without DRADeviceTaints, e.g. 1.35 by default): a dropped taint
// would leave an unhealthy device allocatable, so it is left out of the
// slices instead, as before taints.
func (d *Driver) checkTaintsDropped(err error) {
	var dropped *resourceslice.DroppedFieldsError
	if !errors.As(err, &dropped) || !slices.Contains(dropped.DisabledFeatures(), "DRADeviceTaints") {
		return
	}
	d.mu.Lock()
	first := !d.noTaints
	d.noTaints = true
	d.mu.Unlock()
	if first {
		d.log.Warn("the API server drops device taints (DRADeviceTaints is off): unhealthy devices are left out of the ResourceSlices instead")
		d.rescan()
	}
}
