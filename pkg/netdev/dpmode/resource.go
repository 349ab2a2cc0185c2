package dpmode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/base/failpoint"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/metrics"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// resource keeps one resource's plugin, CDI spec and device-info files in
// step with its device source.
type resource struct {
	name    string
	source  source.Source
	dp      *deviceplugin.Server
	cdi     *cdispec.Writer
	store   *devinfo.Store
	owners  *resources.Owners  // shared by all resources of the daemon
	sriov   *resources.SRIOVDP // a resource of the SR-IOV device plugin's config, else nil
	metrics *metrics.Metrics   // nil: no metrics
	log     *slog.Logger
	kick    chan struct{} // coalesced "rescan now"
	// held asks the kubelet which of this resource's devices pods hold (nil:
	// none is known to be held, so gone devices stay; see dropFreeGone).
	held        func() (map[string]bool, error)
	heldUnknown bool // the last ask failed: logged once

	// The devices themselves live in dp (with their source.Device as Detail): one map.
	mu        sync.Mutex
	files     map[string]*devinfo.DeviceInfo // DP files this process wrote
	conflicts []string                       // devices left out at the last sync: another resource has them
}

func newResource(name string, src source.Source, pluginDir string, cdi *cdispec.Writer, store *devinfo.Store, own *resources.Owners, log *slog.Logger, m *metrics.Metrics) (*resource, error) {
	r := &resource{
		name: name, source: src, cdi: cdi, store: store, owners: own, metrics: m,
		log:   log.With("resource", name, "source", src.Kind()),
		kick:  make(chan struct{}, 1),
		files: map[string]*devinfo.DeviceInfo{},
	}
	var obs deviceplugin.Observer // a nil *Metrics must not become a non-nil Observer
	if m != nil {
		obs = m
	}
	dp, err := deviceplugin.New(deviceplugin.Config{
		ResourceName: name,
		PluginDir:    pluginDir,
		Allocate:     r.allocate,
		Logger:       log,
		Observer:     obs,
	})
	if err != nil {
		return nil, err
	}
	r.dp = dp
	if m != nil {
		m.Add(dp)
	}
	return r, nil
}

// changed asks for a rescan; it never blocks.
func (r *resource) changed() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// sync scans the source and brings the CDI spec, the device-info files and
// then the kubelet's view up to date, in that order, so that a device the
// kubelet can allocate is already described.
func (r *resource) sync() error {
	devs, err := r.source.Scan()
	if err != nil {
		return fmt.Errorf("resource %s: scan: %w", r.name, err)
	}
	devs = r.dropFreeGone(devs)
	devs, conflicts := r.owners.Assign(r.name, r.source.Kind(), devs)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range conflicts {
		if !slices.Contains(r.conflicts, c) { // once, not at every rescan
			r.log.Error("device left out: selected by two resources (make the selectors disjoint)", "conflict", c)
		}
	}
	r.conflicts = conflicts
	var errs []error
	if err := r.cdi.Write(devs); err != nil {
		errs = append(errs, fmt.Errorf("resource %s: %w", r.name, err))
	}
	failpoint.Hit("netdevdp-cdi-written")
	next := source.Index(devs)
	errs = append(errs, r.syncFiles(next)...)
	failpoint.Hit("netdevdp-devinfo-written")
	r.logChanges(next)
	r.dp.Update(toPlugin(devs))
	return errors.Join(errs...)
}

// syncFiles writes the file of every describable device that is new or
// changed, and removes the files of devices that left. A device that is
// still there keeps its file, healthy or not, and also when it can no longer
// be described (a netdev moved into a pod has its sysfs entry there).
func (r *resource) syncFiles(next map[string]source.Device) []error {
	var errs []error
	for id, d := range next {
		if d.Info == nil || (reflect.DeepEqual(r.files[id], d.Info) && r.fileExists(id)) {
			continue
		}
		if err := r.store.WriteDP(r.name, id, d.Info); err != nil {
			errs = append(errs, fmt.Errorf("resource %s: device-info for %s: %w", r.name, id, err))
			continue
		}
		r.files[id] = d.Info
	}
	for id := range r.files {
		if _, ok := next[id]; ok {
			continue
		}
		if err := r.store.RemoveDP(r.name, id); err != nil {
			errs = append(errs, fmt.Errorf("resource %s: remove device-info for %s: %w", r.name, id, err))
			continue
		}
		delete(r.files, id)
	}
	return errs
}

// fileExists tells whether a device's file is still on disk: one removed
// behind our back (a cleanup script, a gc) is written again at the next sync,
// since consumers of a listed device need it.
func (r *resource) fileExists(id string) bool {
	path, err := r.store.DPPath(r.name, id)
	if err != nil {
		return false
	}
	_, err = os.Stat(path)
	return err == nil
}

// logChanges logs what a scan changed against what the plugin serves.
func (r *resource) logChanges(next map[string]source.Device) {
	for _, d := range r.dp.Devices() {
		if _, ok := next[d.ID]; !ok {
			r.log.Info("device left", "device", d.ID)
		}
	}
	for id, d := range next {
		if old, ok := r.dp.Lookup(id); !ok {
			r.log.Info("device found", "device", id, "healthy", d.Healthy, "reason", d.Reason, "numa", d.NUMANode)
		} else if old.Healthy != d.Healthy {
			r.log.Info("device health changed", "device", id, "healthy", d.Healthy, "reason", d.Reason)
		}
	}
}

// toPlugin is what the plugin serves: each device as the kubelet sees it, with the
// whole source.Device as its Detail for allocate.
func toPlugin(devs []source.Device) []deviceplugin.Device {
	out := make([]deviceplugin.Device, 0, len(devs))
	for _, d := range devs {
		pd := d.Device
		pd.Detail = d
		out = append(out, pd)
	}
	return out
}

// cleanup removes what this process wrote of the devices not in held:
// their device-info files and CDI spec entries (the spec file goes with the
// last). The held devices' stay for the next instance, which adopts the files
// (adopt) and writes the spec again at its first sync. It runs after the
// plugin stopped serving, so no Allocate hands out a device meanwhile.
func (r *resource) cleanup(held map[string]bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for id := range r.files {
		if held[id] {
			continue
		}
		if err := r.store.RemoveDP(r.name, id); err != nil {
			errs = append(errs, fmt.Errorf("resource %s: remove device-info for %s: %w", r.name, id, err))
			continue
		}
		delete(r.files, id)
	}
	keep, complete := r.heldDevices(held)
	if !complete {
		// A held device this run cannot describe (it never scanned, or the
		// device left the source): the spec a run wrote before may still
		// hold its entry, so the spec stays whole.
		r.log.Warn("stopping: keeping the CDI spec as it is: a device pods hold is not among the devices served")
		return errors.Join(errs...)
	}
	if len(keep) > 0 {
		r.log.Info("stopping: keeping the device-info and CDI spec entries of the devices pods hold", "devices", len(keep))
	}
	if err := r.cdi.Write(keep); err != nil { // none: the spec file goes
		errs = append(errs, fmt.Errorf("resource %s: %w", r.name, err))
	}
	return errors.Join(errs...)
}

// heldDevices are the served devices in held, and whether every held device
// is among them.
func (r *resource) heldDevices(held map[string]bool) ([]source.Device, bool) {
	var keep []source.Device
	for _, d := range r.dp.Devices() {
		if sd, ok := d.Detail.(source.Device); ok && held[d.ID] {
			keep = append(keep, sd)
		}
	}
	return keep, len(keep) == len(held)
}

// run rescans on every kick until ctx ends.
func (r *resource) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			if err := r.sync(); err != nil {
				r.log.Error("sync failed", "err", err)
				r.metrics.Error(r.name, "sync")
			}
		}
	}
}

// envName is the variable naming the allocated IDs, as the SR-IOV device
// plugin does for PCI: PCIDEVICE_<RESOURCE> with ".", "/" and "-" as "_".
func envName(kind, resourceName string) string {
	prefix := map[string]string{
		"pci": "PCIDEVICE", "netdevs": "NETDEVICE", "vdpa": "VDPADEVICE",
		"vhostuser": "VHOSTUSERDEVICE", "memif": "MEMIFDEVICE",
	}[kind]
	if prefix == "" {
		prefix = "DEVICE"
	}
	return prefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "/", "_", "-", "_").Replace(resourceName))
}
