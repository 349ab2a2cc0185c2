package dramode

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// A pci resource with pfBandwidth publishes each PF's bandwidth as a shared
// counter (KEP-4815 partitionable devices, a counter set per PF in a slice
// of its own) and each VF as consuming perVF of it: the scheduler never
// allocates VFs of one PF past its bandwidth.

// pfBandwidth is a resource's checked pfBandwidth, in bit/s.
type pfBandwidth struct {
	total, perVF int64 // total 0: the PF link's speed
}

// counterSets are the PFs' counter sets by name, as the VFs name them.
type counterSets map[string]resourceapi.CounterSet

// consumeCounters makes the VF d consume perVF of its PF's counter set,
// adding the set to sets. why says what keeps the device out.
func consumeCounters(dev *resourceapi.Device, b *pfBandwidth, sysfsRoot string, d source.Device, sets counterSets) (why string) {
	if d.Info == nil || d.Info.Pci == nil || d.Info.Pci.PfPciAddress == "" {
		return "it is no VF, and the resource's VFs share their PF's bandwidth (pfBandwidth)"
	}
	pf := d.Info.Pci.PfPciAddress
	total := b.total
	if total == 0 {
		pfName, _ := pciNames(sysfsRoot, pf, "")
		if total = linkSpeed(sysfsRoot, pfName); total == 0 {
			return fmt.Sprintf("its PF %s (%s) reports no link speed: set pfBandwidth.total", pf, pfName)
		}
	}
	if b.perVF > total {
		return fmt.Sprintf("pfBandwidth.perVF %s is more than its PF %s has (%s)", netshare.Format(b.perVF), pf, netshare.Format(total))
	}
	name := "pf-" + strings.NewReplacer(":", "-", ".", "-").Replace(strings.ToLower(pf))
	q := func(v int64) resourceapi.Counter {
		return resourceapi.Counter{Value: *resource.NewQuantity(v, resource.DecimalSI)}
	}
	sets[name] = resourceapi.CounterSet{Name: name, Counters: map[string]resourceapi.Counter{netshare.CounterBandwidth: q(total)}}
	dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: name,
		Counters: map[string]resourceapi.Counter{netshare.CounterBandwidth: q(b.perVF)}}}
	return ""
}

// poolSlices chunks the devices into slices (at most 64 per slice when a
// device carries a taint or consumes counters, as the API requires) and
// adds the counter sets in slices of their own (a slice holds devices or
// counters, at most 8 sets).
func poolSlices(all []resourceapi.Device, sets counterSets) []resourceslice.Slice {
	size := resourceapi.ResourceSliceMaxDevices
	if slices.ContainsFunc(all, func(d resourceapi.Device) bool { return len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 }) {
		size = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	}
	var out []resourceslice.Slice
	for chunk := range slices.Chunk(all, size) {
		out = append(out, resourceslice.Slice{Devices: chunk})
	}
	names := slices.Sorted(maps.Keys(sets))
	for chunk := range slices.Chunk(names, resourceapi.ResourceSliceMaxCounterSets) {
		s := resourceslice.Slice{}
		for _, n := range chunk {
			s.SharedCounters = append(s.SharedCounters, sets[n])
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		out = []resourceslice.Slice{{}} // the driver runs and has no devices
	}
	return out
}

// resourceFeatures adds what the device's resource config asks beyond a
// whole device: a share's capacities, a VF's consumed counters.
func resourceFeatures(dev *resourceapi.Device, e entry, driver, sysfs string,
	attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, sets counterSets) (why string) {
	switch {
	case e.res.share != nil:
		return shareCapacity(dev, e.res.share, sysfs, shareIfName(driver, e.res.source.Kind(), e.dev, attrs))
	case e.res.pfBW != nil:
		return consumeCounters(dev, e.res.pfBW, sysfs, e.dev, sets)
	}
	return ""
}

// configure takes the resource's share or pfBandwidth from its config.
func (r *res) configure(rc resources.Resource) error {
	var err error
	if rc.Share != nil {
		r.share, err = rc.Share.Validate()
	}
	if rc.PFBandwidth != nil && err == nil {
		r.pfBW = &pfBandwidth{}
		r.pfBW.total, r.pfBW.perVF, err = rc.PFBandwidth.Validate()
	}
	return err
}
