package dramode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// PrepareResourceClaims prepares each claim's devices of this driver: their
// CDI spec entries and DP device-info files, and answers their CDI names.
// A claim prepared already gets the same answer (its files are written
// again if someone removed them). Each claim fails or succeeds on its own.
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		start := time.Now()
		rec, err := d.prepareClaim(c)
		d.observeClaim("prepare", start, err)
		if err != nil {
			d.log.Error("prepare failed", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[c.UID] = d.result(rec)
	}
	return out, nil
}

func (d *Driver) prepareClaim(c *resourceapi.ResourceClaim) (*record, error) {
	if rec, ok := d.prepared[c.UID]; ok {
		return rec, d.writeFiles(rec)
	}
	rec, err := d.resolve(c)
	if err != nil {
		return nil, err
	}
	// The record first: whatever a crash leaves written, a record names it
	// and the kubelet's unprepare removes it.
	if err := d.claims.save(rec); err != nil {
		return nil, err
	}
	d.prepared[c.UID] = rec
	if err := d.writeFiles(rec); err != nil {
		if uerr := d.unprepare(c.UID); uerr != nil {
			err = errors.Join(err, fmt.Errorf("undo: %w", uerr))
		}
		return nil, err
	}
	d.log.Info("claim prepared", "claim", rec.String(), "devices", len(rec.Devices))
	return rec, nil
}

// resolve maps a claim's allocation results of this driver to our devices.
// Results of other drivers are theirs to prepare.
func (d *Driver) resolve(c *resourceapi.ResourceClaim) (*record, error) {
	rec := &record{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
	where := fmt.Sprintf("claim %s/%s", c.Namespace, c.Name)
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("%s is not allocated", where)
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != d.name {
			continue
		}
		if r.Pool != d.pool {
			return nil, fmt.Errorf("%s: device %s is in pool %q, not in this node's pool %q", where, r.Device, r.Pool, d.pool)
		}
		e, ok := d.devices[r.Device]
		if !ok {
			return nil, fmt.Errorf("%s: device %q is not in pool %q (unknown or gone)", where, r.Device, d.pool)
		}
		if !e.dev.Healthy {
			return nil, fmt.Errorf("%s: device %q (%s %s) is unhealthy: %s", where, r.Device, e.res.name, e.dev.ID, e.dev.Reason)
		}
		if e.res.share != nil {
			p, err := d.sharePrepared(r, e)
			if err != nil {
				return nil, fmt.Errorf("%s: device %q (%s %s): %w", where, r.Device, e.res.name, e.dev.ID, err)
			}
			rec.Devices = append(rec.Devices, p)
			continue
		}
		if holder := d.holder(e.res.name, e.dev.ID); holder != nil && holder.UID != c.UID {
			return nil, fmt.Errorf("%s: device %q (%s %s) is prepared for claim %s already", where, r.Device, e.res.name, e.dev.ID, holder)
		}
		rec.Devices = append(rec.Devices, preparedDevice{
			Requests: []string{r.Request}, Pool: r.Pool, Name: r.Device,
			Resource: e.res.name, CDI: e.res.cdi.QualifiedName(e.dev.ID), Device: e.dev,
		})
	}
	if err := d.sriovEnv(rec); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return rec, nil
}

// holder is the prepared claim holding a device, or nil.
func (d *Driver) holder(resource, id string) *record {
	for _, rec := range d.prepared {
		for _, p := range rec.Devices {
			if p.Resource == resource && p.Device.ID == id {
				return rec
			}
		}
	}
	return nil
}

// result is the kubelet's answer for a prepared claim: each device's CDI
// name and, for kubeletplugin to write when Options.Metadata is on, its
// metadata.
func (d *Driver) result(r *record) kubeletplugin.PrepareResult {
	res := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{}}
	for _, p := range r.Devices {
		res.Devices = append(res.Devices, kubeletplugin.Device{
			Requests: p.Requests, PoolName: p.Pool, DeviceName: p.Name, CDIDeviceIDs: []string{p.CDI},
			Metadata: d.metadata(p), ShareID: p.Share.uid(),
		})
	}
	return res
}

// UnprepareResourceClaims removes what PrepareResourceClaims wrote. A claim
// not prepared (any more) is fine: the kubelet retries.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		start := time.Now()
		out[c.UID] = d.unprepare(c.UID)
		d.observeClaim("unprepare", start, out[c.UID])
		if out[c.UID] != nil {
			d.log.Error("unprepare failed", "claim", c.String(), "uid", c.UID, "err", out[c.UID])
		}
	}
	return out, nil
}

func (d *Driver) unprepare(uid types.UID) error {
	rec, ok := d.prepared[uid]
	if !ok {
		return nil
	}
	var errs []error
	for _, p := range rec.Devices {
		if err := d.store.RemoveDP(p.Resource, p.Device.ID); err != nil {
			errs = append(errs, fmt.Errorf("claim %s: %w", rec, err))
		}
	}
	delete(d.prepared, uid)
	errs = append(errs, d.writeSpecs(rec.resources())...)
	if len(errs) > 0 {
		d.prepared[uid] = rec // keep it: the kubelet retries, and it must find it
		return errors.Join(errs...)
	}
	if err := d.claims.remove(uid); err != nil {
		return err
	}
	d.log.Info("claim unprepared", "claim", rec.String())
	return nil
}

// writeFiles writes a prepared claim's DP device-info files and the CDI
// specs of its resources.
func (d *Driver) writeFiles(rec *record) error {
	var errs []error
	for _, p := range rec.Devices {
		if p.Device.Info == nil {
			continue // no device-info type describes it (a plain netdev)
		}
		if err := d.store.WriteDP(p.Resource, p.Device.ID, p.Device.Info); err != nil {
			errs = append(errs, fmt.Errorf("claim %s: device-info for %s: %w", rec, p.Device.ID, err))
		}
	}
	errs = append(errs, d.writeSpecs(rec.resources())...)
	return errors.Join(errs...)
}

// writeSpecs makes each named resource's CDI spec hold exactly the devices
// prepared for some claim (and removes it when there are none).
func (d *Driver) writeSpecs(resources []string) []error {
	var errs []error
	for _, r := range d.resources {
		if !slices.Contains(resources, r.name) {
			continue
		}
		var devs []source.Device
		for _, rec := range d.prepared {
			for _, p := range rec.Devices {
				if p.Resource == r.name {
					devs = append(devs, p.Device)
				}
			}
		}
		source.Sort(devs)
		if err := r.cdi.Write(devs); err != nil {
			errs = append(errs, fmt.Errorf("resource %s: %w", r.name, err))
		}
	}
	return errs
}

func (r *record) resources() []string {
	var out []string
	for _, p := range r.Devices {
		if !slices.Contains(out, p.Resource) {
			out = append(out, p.Resource)
		}
	}
	return out
}

// restore takes over the claims an earlier run prepared and writes their
// files again where missing. A record naming a resource no longer in the
// config still counts (its device stays held until unprepare), but no CDI
// spec is written for that resource.
func (d *Driver) restore() error {
	recs, err := d.claims.load()
	if err != nil {
		return err
	}
	for _, rec := range recs {
		d.prepared[rec.UID] = rec
	}
	for _, rec := range recs {
		if err := d.writeFiles(rec); err != nil {
			d.log.Error("claim prepared by an earlier run: rewriting its files failed", "claim", rec.String(), "err", err)
			continue
		}
		d.log.Info("claim prepared by an earlier run taken over", "claim", rec.String())
	}
	return nil
}
