package dramode

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

// attrsOf flattens a device's attributes to strings ("7" for ints).
func attrsOf(d resourceapi.Device) map[string]string {
	out := map[string]string{}
	for k, v := range d.Attributes {
		switch {
		case v.StringValue != nil:
			out[string(k)] = *v.StringValue
		case v.IntValue != nil:
			out[string(k)] = strconv.FormatInt(*v.IntValue, 10)
		}
	}
	return out
}

// published is the driver's one pool: device name -> attributes.
func published(t *testing.T, d *Driver) map[string]map[string]string {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if got := slices.Collect(maps.Keys(d.published.Pools)); !slices.Equal(got, []string{node}) {
		t.Fatalf("pools %v, want one named after the node", got)
	}
	out := map[string]map[string]string{}
	for _, s := range d.published.Pools[node].Slices {
		for _, dev := range s.Devices {
			out[dev.Name] = attrsOf(dev)
		}
	}
	return out
}

func TestSlicesDescribeEverySource(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	got := published(t, d)
	dom := DefaultDriverName + "/"
	veth := f.VethPrefix + "a"
	want := map[string]map[string]string{
		DeviceName(netdevtest.ResVF, "0000:01:01.0"): {"type": "pci", "pciAddress": "0000:01:01.0", "pfName": "ens1f0", "numaNode": "1", "interfaceName": "ens1f0v0"},
		DeviceName(netdevtest.ResVF, "0000:01:01.1"): {"type": "pci", "pciAddress": "0000:01:01.1", "pfName": "ens1f0", "numaNode": "1"},
		DeviceName(netdevtest.ResVF, "0000:01:01.2"): {"type": "pci", "pciAddress": "0000:01:01.2", "pfName": "ens1f0", "numaNode": "0"},
		DeviceName(netdevtest.ResVF, "0000:01:01.3"): {"type": "pci", "pciAddress": "0000:01:01.3", "pfName": "ens1f0", "numaNode": "0"},
		veth:               {"type": "netdev", "interfaceName": veth},
		f.VethPrefix + "b": {"type": "netdev", "interfaceName": f.VethPrefix + "b"},
		DeviceName(netdevtest.ResVhost, "vhu0.sock"): {"type": "vhostuser", "socketPath": filepath.Join(f.SockDir, "vhu0.sock")},
		DeviceName(netdevtest.ResVhost, "vhu1.sock"): {"type": "vhostuser", "socketPath": filepath.Join(f.SockDir, "vhu1.sock")},
		"vdpa0": {"type": "vdpa", "pciAddress": "0000:65:00.2", "numaNode": "1"},
	}
	ids := map[string][2]string{ // name -> resource, device ID
		DeviceName(netdevtest.ResVF, "0000:01:01.0"): {netdevtest.ResVF, "0000:01:01.0"}, DeviceName(netdevtest.ResVF, "0000:01:01.1"): {netdevtest.ResVF, "0000:01:01.1"},
		DeviceName(netdevtest.ResVF, "0000:01:01.2"): {netdevtest.ResVF, "0000:01:01.2"}, DeviceName(netdevtest.ResVF, "0000:01:01.3"): {netdevtest.ResVF, "0000:01:01.3"},
		veth: {netdevtest.ResVeth, veth}, f.VethPrefix + "b": {netdevtest.ResVeth, f.VethPrefix + "b"},
		DeviceName(netdevtest.ResVhost, "vhu0.sock"): {netdevtest.ResVhost, "vhu0.sock"}, DeviceName(netdevtest.ResVhost, "vhu1.sock"): {netdevtest.ResVhost, "vhu1.sock"},
		"vdpa0": {netdevtest.ResVDPA, "vdpa0"},
	}
	if len(got) != len(want) {
		t.Errorf("published %d devices %v, want %d", len(got), slices.Sorted(maps.Keys(got)), len(want))
	}
	for name, typed := range want {
		w := map[string]string{string(AttrResourceName): ids[name][0], string(AttrDeviceID): ids[name][1]}
		for k, v := range typed {
			w[dom+k] = v
		}
		// Kubernetes' standard attributes of every PCI device (the fake
		// sysfs puts them all under root complex pci0000:00).
		if addr, ok := typed["pciAddress"]; ok {
			w["resource.kubernetes.io/pciBusID"], w["resource.kubernetes.io/pcieRoot"] = addr, "pci0000:00"
		}
		if n, ok := typed["numaNode"]; ok {
			w["resource.kubernetes.io/numaNode"] = n
		}
		if !maps.Equal(got[name], w) {
			t.Errorf("device %s:\n got %v\nwant %v", name, got[name], w)
		}
		if errs := validation.IsDNS1123Label(name); len(errs) != 0 {
			t.Errorf("device name %q: %v", name, errs)
		}
	}
}

func TestDeviceNames(t *testing.T) {
	for _, tc := range []struct{ res, id, prefix string }{
		{"example.com/vf", "0000:01:01.0", "0000-01-01-0-"},
		{"example.com/vhu", "vhu0.sock", "vhu0-sock-"},
		{"example.com/n", "Eth_1", "eth-1-"},
		{"example.com/n", strings.Repeat("x", 70), strings.Repeat("x", 54) + "-"},
		{"example.com/n", "::", "d-"},
	} {
		got := DeviceName(tc.res, tc.id)
		if !strings.HasPrefix(got, tc.prefix) || len(validation.IsDNS1123Label(got)) != 0 {
			t.Errorf("DeviceName(%q) = %q, want a DNS label starting %q", tc.id, got, tc.prefix)
		}
		if got != DeviceName(tc.res, tc.id) {
			t.Errorf("DeviceName(%q) not stable", tc.id)
		}
	}
	if DeviceName("a.com/x", "p.sock") == DeviceName("b.com/x", "p.sock") {
		t.Error("two resources' changed IDs share a name")
	}
	if got := DeviceName("a.com/x", "eth1"); got != "eth1" {
		t.Errorf("a DNS label ID became %q", got)
	}
}

// TestSlicesFollowTheSources: a VF leaving sysfs that no claim holds leaves
// the slice (TestGoneDevicesLeaveTheSliceUnlessPrepared: a held one stays); a
// removed socket turns unhealthy and stays in the slice, tainted; a new socket
// joins it; a VF back in sysfs is published again, untainted.
func TestSlicesFollowTheSources(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	vf0, sock2 := DeviceName(netdevtest.ResVF, "0000:01:01.0"), DeviceName(netdevtest.ResVhost, "vhu2.sock")
	sysfstest.RemovePCI(t, f.Sysfs, "0000:01:01.0")
	l := f.Listen("vhu2.sock")
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
	if got := tainted(t, d); len(got) != 0 {
		t.Errorf("tainted %v, want none", got)
	}
	if _, ok := published(t, d)[vf0]; ok {
		t.Error("a VF gone from sysfs is still published")
	}
	if _, ok := published(t, d)[sock2]; !ok {
		t.Error("new socket not published")
	}
	l.Close()
	sysfstest.AddPCI(t, f.Sysfs, sysfstest.E810VF("0000:01:01.0", sysfstest.NodePF, 1))
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
	if got := tainted(t, d); !slices.Equal(got, []string{sock2}) {
		t.Errorf("tainted %v, want only the removed socket", got)
	}
	if n := len(published(t, d)); n != 10 {
		t.Errorf("%d devices published, want 10", n)
	}
}

func TestOverlapAtStartIsAnError(t *testing.T) {
	f := newFixture(t)
	f.Config.Resources = append(f.Config.Resources, f.Config.Resources[0])
	f.Config.Resources[len(f.Config.Resources)-1].ResourceName = "example.com/vf-again"
	d, err := New(f.Config, Options{NodeName: node, PluginsDir: f.pluginsDir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.opts.Client = nil
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.conflictsAtStart(); err == nil || !strings.Contains(err.Error(), "0000:01:01.0") {
		t.Errorf("overlap: %v", err)
	}
}

// recorder is a publisher keeping what it was given.
type recorder struct {
	got chan resourceslice.DriverResources
}

func (r recorder) PublishResources(_ context.Context, dr resourceslice.DriverResources) error {
	r.got <- dr
	return nil
}

// TestWatchPublishesChanges: the watch loop publishes at once, and again when a source
// changes (a new socket, seen by the socket dir's watcher or the rescan), not otherwise.
func TestWatchPublishesChanges(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	d.resync = 50 * time.Millisecond // the watcher may start after the socket comes
	c, cancel := context.WithCancel(context.Background())
	rec := recorder{got: make(chan resourceslice.DriverResources, 16)}
	done := make(chan struct{})
	go func() { d.watch(c, rec); close(done) }()
	defer func() { cancel(); <-done }()
	names := func(dr resourceslice.DriverResources) []string {
		var out []string
		for _, s := range dr.Pools[node].Slices {
			for _, dev := range s.Devices {
				out = append(out, dev.Name)
			}
		}
		return out
	}
	if first := names(<-rec.got); len(first) != 9 {
		t.Fatalf("first publish: %v", first)
	}
	f.Listen("vhu7.sock")
	want := DeviceName(netdevtest.ResVhost, "vhu7.sock")
	if next := names(<-rec.got); !slices.Contains(next, want) || len(next) != 10 {
		t.Errorf("published after a new socket: %v", next)
	}
}
