package dramode

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// entry is a published device: what a claim's allocation result names.
type entry struct {
	res *res
	dev source.Device
}

// scanned is one resource's devices from one scan.
type scanned struct {
	res  *res
	devs []source.Device
}

// inventory turns a scan into the driver's devices, by slice device name,
// healthy or not: an unhealthy device is published with a taint (see
// driverResources), and the kubelet hears of its health (health.go). A name
// two resources' devices would share goes to the first resource in config
// order; the later one is left out and reported.
func inventory(scans []scanned) (devices map[string]entry, problems []string) {
	devices = map[string]entry{}
	for _, s := range scans {
		for _, d := range s.devs {
			name := DeviceName(s.res.name, d.ID)
			if other, taken := devices[name]; taken {
				problems = append(problems, fmt.Sprintf("device %s of %s is left out: its name %q is taken by device %s of %s",
					d.ID, s.res.name, name, other.dev.ID, other.res.name))
				continue
			}
			devices[name] = entry{res: s.res, dev: d}
		}
	}
	return devices, problems
}

// TaintKey is the key of the taint an unhealthy device carries in the
// slice, under the driver's domain: "<driver>/unhealthy".
func TaintKey(driver string) string { return driver + "/unhealthy" }

// unhealthyTaint keeps the scheduler from allocating the device to a claim
// that does not tolerate it (KEP-5055). NoSchedule, not NoExecute: a pod
// holding the device is told through the kubelet's health status, and it
// is its owner's call to replace it (a link may come back).
func unhealthyTaint(driver string) resourceapi.DeviceTaint {
	return resourceapi.DeviceTaint{Key: TaintKey(driver), Effect: resourceapi.DeviceTaintEffectNoSchedule}
}

// driverResources is the one pool (named after the node) with every
// device, in slices of at most ResourceSliceMaxDevices, sorted by name so
// the same devices give the same slices. An unhealthy device carries
// unhealthyTaint; when the API server cannot store taints (taints false) it
// is left out instead, so that it cannot be allocated either way. An empty
// pool still has one slice: it tells the scheduler the driver runs and has
// no devices.
func driverResources(driver, pool, sysfs string, devices map[string]entry, taints bool) (resourceslice.DriverResources, []string) {
	names := make([]string, 0, len(devices))
	for n := range devices {
		names = append(names, n)
	}
	slices.Sort(names)
	var problems []string
	var all []resourceapi.Device
	sets := counterSets{}
	for _, n := range names {
		e := devices[n]
		if !e.dev.Healthy && !taints {
			continue
		}
		attrs, dropped := attributes(driver, e.res.name, e.res.source.Kind(), sysfs, e.dev)
		if len(dropped) > 0 {
			problems = append(problems, fmt.Sprintf("device %s of %s: attributes %s left out: longer than %d characters",
				e.dev.ID, e.res.name, strings.Join(dropped, ", "), resourceapi.DeviceAttributeMaxValueLength))
		}
		dev := resourceapi.Device{Name: n, Attributes: attrs}
		if why := resourceFeatures(&dev, e, driver, sysfs, attrs, sets); why != "" {
			problems = append(problems, fmt.Sprintf("device %s of %s is left out: %s", e.dev.ID, e.res.name, why))
			continue
		}
		if !e.dev.Healthy {
			dev.Taints = []resourceapi.DeviceTaint{unhealthyTaint(driver)}
		}
		all = append(all, dev)
	}
	p := resourceslice.Pool{Slices: poolSlices(all, sets)}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{pool: p}}, problems
}
