package dramode

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

// tainted lists the published devices carrying the unhealthy taint, and
// fails on any other taint.
func tainted(t *testing.T, d *Driver) []string {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, s := range d.published.Pools[node].Slices {
		for _, dev := range s.Devices {
			switch {
			case len(dev.Taints) == 0:
			case len(dev.Taints) == 1 && dev.Taints[0] == unhealthyTaint(DefaultDriverName):
				out = append(out, dev.Name)
			default:
				t.Errorf("device %s taints %+v", dev.Name, dev.Taints)
			}
		}
	}
	slices.Sort(out)
	return out
}

// unhealthy is what the health stream says is unhealthy: name -> message.
func unhealthy(r kubeletplugin.DeviceHealthReport) map[string]string {
	out := map[string]string{}
	for _, h := range r.Devices {
		if h.Health != kubeletplugin.HealthStatusHealthy {
			out[h.DeviceName] = string(h.Health) + ": " + h.Message
		}
	}
	return out
}

// healthStream runs WatchHealthStatus as the helper does and returns its
// reports; it ends with the test.
func healthStream(t *testing.T, d *Driver) <-chan kubeletplugin.DeviceHealthReport {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchHealthStatus: %v", err)
		}
	})
	return reports
}

// TestUnhealthyDevicesAreTaintedAndReported: a deleted veth pair and the VFs
// of a PF whose link is down are tainted in the slice, reported Unhealthy
// (with the reason) on the health stream, and refused to a new claim; when
// they are back both the taint and the report say so. Every sync sends a
// report, also when nothing changed (the kubelet's lease).
func TestUnhealthyDevicesAreTaintedAndReported(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	reports := healthStream(t, d)
	first := <-reports
	if len(first.Devices) != 9 || len(unhealthy(first)) != 0 {
		t.Fatalf("first report: %+v", first)
	}
	for _, h := range first.Devices {
		if h.PoolName != node || h.HealthCheckTimeout < minHealthTimeout || h.LastUpdated.IsZero() {
			t.Errorf("device health %+v", h)
		}
	}
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
	if again := <-reports; len(again.Devices) != 9 || again.Devices[0].LastUpdated.Before(first.Devices[0].LastUpdated) {
		t.Errorf("report of a sync without change: %+v", again)
	}

	a, b := f.VethPrefix+"a", f.VethPrefix+"b"
	l, err := netlink.LinkByName(a)
	if err != nil {
		t.Fatal(err)
	}
	// The link source learns of a deletion from netlink: watch it like Run.
	watching(t, d, f.VethPrefix, reports)
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	sysfstest.SetOperState(t, f.Sysfs, sysfstest.NodePF, sysfstest.NodePFName, "down")
	vfs := []string{DeviceName(netdevtest.ResVF, "0000:01:01.0"), DeviceName(netdevtest.ResVF, "0000:01:01.1"),
		DeviceName(netdevtest.ResVF, "0000:01:01.2"), DeviceName(netdevtest.ResVF, "0000:01:01.3")}
	want := map[string]string{a: "Unhealthy: interface deleted", b: "Unhealthy: interface deleted"}
	for _, vf := range vfs {
		want[vf] = "Unhealthy: PF ens1f0 link down"
	}
	waitReport(t, reports, "veth pair deleted, PF link down", want)
	if got, w := noWitness(tainted(t, d)), slices.Sorted(slices.Values(append([]string{a, b}, vfs...))); !slices.Equal(got, w) {
		t.Errorf("tainted %v, want %v", got, w)
	}
	c := claim("late", node, a)
	if err := prepare(t, d, c)[c.UID].Err; err == nil || !strings.Contains(err.Error(), "is unhealthy: interface deleted") {
		t.Errorf("prepare of a deleted veth: %v", err)
	}

	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}); err != nil {
		t.Fatal(err)
	}
	sysfstest.SetOperState(t, f.Sysfs, sysfstest.NodePF, sysfstest.NodePFName, "up")
	waitReport(t, reports, "all back", map[string]string{})
	if got := noWitness(tainted(t, d)); len(got) != 0 {
		t.Errorf("tainted after recovery: %v", got)
	}
	if err := prepare(t, d, c)[c.UID].Err; err != nil {
		t.Errorf("prepare of the veth back: %v", err)
	}
}

// watching runs d's watch loop, like Run, until the test ends, and returns
// once its netlink watcher reports a deletion: witness veth pairs
// (<prefix>w<N>, <prefix>x<N>) are made and deleted until one is reported
// unhealthy. They stay unhealthy; waitReport ignores them.
func watching(t *testing.T, d *Driver, prefix string, reports <-chan kubeletplugin.DeviceHealthReport) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.watch(ctx, discard{}); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for i := 0; ; i++ {
		w, x := fmt.Sprintf("%sw%d", prefix, i), fmt.Sprintf("%sx%d", prefix, i)
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: w}, PeerName: x}); err != nil {
			t.Fatal(err)
		}
		for report := range reports { // until a sync has seen it
			if slices.ContainsFunc(report.Devices, func(h kubeletplugin.DeviceHealth) bool { return h.DeviceName == w }) {
				break
			}
		}
		l, err := netlink.LinkByName(w)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkDel(l); err != nil {
			t.Fatal(err)
		}
		for range 5 { // a few syncs: the deletion's event or a rescan
			if report := <-reports; unhealthy(report)[w] != "" {
				return
			}
		}
		if i == 50 {
			t.Fatal("the watcher never reported a deletion")
		}
	}
}

// waitReport reads reports until one's unhealthy devices, witnesses aside,
// are want.
func waitReport(t *testing.T, reports <-chan kubeletplugin.DeviceHealthReport, what string, want map[string]string) kubeletplugin.DeviceHealthReport {
	t.Helper()
	var last kubeletplugin.DeviceHealthReport
	for range 200 { // a report per sync, every 100ms at most
		last = <-reports
		got := unhealthy(last)
		maps.DeleteFunc(got, func(name, _ string) bool { return witness.MatchString(name) })
		if len(got) == len(want) && func() bool {
			for k, v := range want {
				if got[k] != v {
					return false
				}
			}
			return true
		}() {
			return last
		}
	}
	t.Fatalf("%s: last report says unhealthy %v, want %v", what, unhealthy(last), want)
	return last
}

// witness matches the witness veths' names.
var witness = regexp.MustCompile(`[wx][0-9]+$`)

func noWitness(names []string) []string {
	return slices.DeleteFunc(names, witness.MatchString)
}

// discard is a publisher that publishes nothing.
type discard struct{}

func (discard) PublishResources(context.Context, resourceslice.DriverResources) error { return nil }

// TestPreparedDeviceGoneIsReportedUnhealthy: a prepared device that no
// source lists any more (a removed resource, a destroyed pair) is reported
// Unhealthy: the pod holding it must hear of it.
func TestPreparedDeviceGoneIsReportedUnhealthy(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	c := claim("net", node, "vdpa0")
	if err := prepare(t, d, c)[c.UID].Err; err != nil {
		t.Fatal(err)
	}
	f.Config.Resources = f.Config.Resources[:3] // netdev-dp restarts without the vDPA resource
	d2 := f.driver()
	report, _ := d2.healthReport()
	if got := unhealthy(report); len(got) != 1 || got["vdpa0"] != "Unhealthy: no longer found on the node" {
		t.Errorf("unhealthy %v", got)
	}
}

// TestDroppedTaintsLeaveUnhealthyDevicesOut: on an API server that drops
// device taints (DRADeviceTaints off, 1.35's default) the driver publishes
// no unhealthy device at all, so the scheduler cannot allocate one.
func TestDroppedTaintsLeaveUnhealthyDevicesOut(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	sysfstest.SetOperState(t, f.Sysfs, sysfstest.NodePF, sysfstest.NodePFName, "down")
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
	vf0 := DeviceName(netdevtest.ResVF, "0000:01:01.0")
	if got := tainted(t, d); len(got) != 4 || !slices.Contains(got, vf0) {
		t.Fatalf("tainted %v, want the four VFs of the PF whose link is down", got)
	}
	desired := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: resourceapi.ResourceSliceSpec{
		Devices: []resourceapi.Device{{Name: vf0, Taints: []resourceapi.DeviceTaint{unhealthyTaint(DefaultDriverName)}}}}}
	actual := desired.DeepCopy()
	actual.Spec.Devices[0].Taints = nil
	err := &resourceslice.DroppedFieldsError{PoolName: node, DesiredSlice: desired, ActualSlice: actual}
	d.HandleError(context.Background(), recoverable{err}, "publishing slices")
	if d.fatalErr() != nil {
		t.Fatal("dropped fields stopped the driver")
	}
	select {
	case <-d.kick:
	default:
		t.Error("no rescan asked for")
	}
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
	if _, ok := published(t, d)[vf0]; ok || len(tainted(t, d)) != 0 {
		t.Errorf("unhealthy VF still published: %v", published(t, d)[vf0])
	}
	if report, _ := d.healthReport(); unhealthy(report)[vf0] == "" {
		t.Error("the health stream no longer reports the unhealthy VF")
	}
}

// recoverable wraps an error as kubeletplugin's ResourceSlice controller
// hands it to HandleError.
type recoverable struct{ error }

func (r recoverable) Is(other error) bool { return other == kubeletplugin.ErrRecoverable }
func (r recoverable) Unwrap() error       { return r.error }
