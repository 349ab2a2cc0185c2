package dramode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// publisher is what sync hands the slices to (kubeletplugin.Helper).
type publisher interface {
	PublishResources(ctx context.Context, r resourceslice.DriverResources) error
}

// sync scans every device source and recomputes the published devices. It
// reports scan errors; devices of a source that failed keep their last state.
func (d *Driver) sync() error {
	var scans []scanned
	var errs, conflicts []string
	for _, r := range d.resources {
		devs, err := r.source.Scan()
		if err != nil {
			errs = append(errs, fmt.Sprintf("resource %s: scan: %v", r.name, err))
			devs = d.lastDevices(r)
		}
		devs = d.dropFreeGone(r, devs)
		kept, c := d.owners.Assign(r.name, r.source.Kind(), devs)
		conflicts = append(conflicts, c...)
		scans = append(scans, scanned{res: r, devs: kept})
	}
	d.observeScan(scans)
	devices, more := inventory(scans)
	problems := append(slices.Clone(conflicts), more...)
	d.mu.Lock()
	defer d.mu.Unlock()
	dr, more := driverResources(d.name, d.pool, d.sysfs, devices, !d.noTaints)
	problems = append(problems, more...)

	for _, p := range problems {
		if !slices.Contains(d.problems, p) { // once, not at every rescan
			d.log.Error("device left out or described partly", "problem", p)
		}
	}
	d.problems, d.conflicts = problems, conflicts
	d.logChanges(devices)
	d.devices = devices
	if d.published == nil || !reflect.DeepEqual(*d.published, dr) {
		d.published = &dr
	}
	d.scanned(time.Now())
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// lastDevices are r's devices as published last, for a failed scan.
func (d *Driver) lastDevices(r *res) []source.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []source.Device
	for _, e := range d.devices {
		if e.res == r {
			out = append(out, e.dev)
		}
	}
	source.Sort(out)
	return out
}

func (d *Driver) logChanges(next map[string]entry) {
	for n, e := range d.devices {
		if _, ok := next[n]; !ok {
			d.log.Info("device gone", "resource", e.res.name, "device", e.dev.ID)
		}
	}
	for n, e := range next {
		old, ok := d.devices[n]
		switch {
		case !ok:
			d.log.Info("device published", "resource", e.res.name, "device", e.dev.ID, "name", n, "healthy", e.dev.Healthy, "reason", e.dev.Reason)
		case old.dev.Healthy && !e.dev.Healthy:
			d.log.Warn("device unhealthy: tainted, no new claims get it", "resource", e.res.name, "device", e.dev.ID, "reason", e.dev.Reason)
		case !old.dev.Healthy && e.dev.Healthy:
			d.log.Info("device healthy again: taint removed", "resource", e.res.name, "device", e.dev.ID)
		}
	}
}

// conflictsAtStart fails the start when resources overlap (see resources.Owners).
func (d *Driver) conflictsAtStart() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return resources.OverlapError(d.conflicts, "claims")
}

// watch publishes the slices, then rescans on every source event and every
// resync period (sysfs has no events), publishing again when they change.
func (d *Driver) watch(ctx context.Context, p publisher) {
	changed := d.rescan
	var wg sync.WaitGroup
	defer wg.Wait() // the sources' watchers end with ctx
	for _, r := range d.resources {
		if n, ok := r.source.(source.Notifier); ok {
			wg.Go(func() {
				if err := n.Watch(ctx, changed); err != nil {
					d.log.Error("watching the device source failed; relying on periodic rescans", "resource", r.name, "err", err)
				}
			})
		}
	}
	ticker := time.NewTicker(d.resync)
	defer ticker.Stop()
	var last *resourceslice.DriverResources
	for {
		d.mu.Lock()
		cur := d.published
		d.mu.Unlock()
		if cur != last {
			if err := p.PublishResources(ctx, *cur); err != nil {
				d.log.Error("publishing ResourceSlices failed", "err", err)
			}
			last = cur
		}
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		case <-ticker.C:
		}
		if err := d.sync(); err != nil {
			d.log.Error("rescan failed", "err", err)
		}
	}
}

// rescan asks the watch loop for a sync soon; it never blocks.
func (d *Driver) rescan() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// withKlog routes the logs of kubeletplugin and the ResourceSlice controller
// (klog, through the context) to our slog logger.
func withKlog(ctx context.Context, log *slog.Logger) context.Context {
	return klog.NewContext(ctx, logr.FromSlogHandler(log.Handler()))
}
