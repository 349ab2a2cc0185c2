package dramode

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// observerLog is an Observer that keeps what it heard.
type observerLog struct {
	mu        sync.Mutex
	claims    []string // "<op> ok|<error>"
	scanned   map[string][2]int
	published []int // devices per publish
	errs      []error
}

func (r *observerLog) Scanned(res string, healthy, unhealthy int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scanned[res] = [2]int{healthy, unhealthy}
}
func (r *observerLog) Published(_, devices int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.published = append(r.published, devices)
	if err != nil {
		r.errs = append(r.errs, err)
	}
}
func (r *observerLog) SlicesInSync() {}
func (r *observerLog) SliceError(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}
func (r *observerLog) Claim(op string, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := "ok"
	if err != nil {
		res = err.Error()
	}
	if took <= 0 {
		res += " (no duration)"
	}
	r.claims = append(r.claims, op+" "+res)
}
func (r *observerLog) Registered(bool) {}

// observedDriver is the fixture's driver with a observerLog as its observer.
func observedDriver(f *fixture) (*Driver, *observerLog) {
	rec := &observerLog{scanned: map[string][2]int{}}
	d, err := New(f.Config, Options{NodeName: node, PluginsDir: f.pluginsDir, Observer: rec}, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := d.sync(); err != nil {
		f.t.Fatal(err)
	}
	return d, rec
}

// TestObserverHearsScansClaimsAndPublishes: each scan's devices per resource, each
// claim prepared or unprepared with its outcome, each publish and each slice error
// reach the observer.
func TestObserverHearsScansClaimsAndPublishes(t *testing.T) {
	f := newFixture(t)
	d, rec := observedDriver(f)
	if got := rec.scanned[netdevtest.ResVhost]; got != [2]int{2, 0} {
		t.Errorf("vhost-user devices %v, want 2 healthy", got)
	}
	if got := rec.scanned[netdevtest.ResVF]; got[0] == 0 {
		t.Errorf("VF devices %v, want some healthy", got)
	}
	good := claim("good", node, DeviceName(netdevtest.ResVhost, "vhu0.sock"))
	bad := claim("bad", node, "no-such-device")
	prepare(t, d, good)
	prepare(t, d, bad)
	unprepare(t, d, good)
	want := []string{"prepare ok", `prepare claim ns/bad: device "no-such-device" is not in pool "node-a" (unknown or gone)`, "unprepare ok"}
	if !slices.Equal(rec.claims, want) {
		t.Errorf("claims heard %q, want %q", rec.claims, want)
	}

	d.mu.Lock()
	cur := *d.published
	d.mu.Unlock()
	p := d.observed(failingPublisher{})
	if err := p.PublishResources(context.Background(), cur); err == nil {
		t.Fatal("the wrapped publisher's error is lost")
	}
	d.HandleError(context.Background(), errors.Join(kubeletplugin.ErrRecoverable, errors.New("slice rejected")), "publish")
	if len(rec.published) != 1 || rec.published[0] != len(poolDevices(cur, node)) || len(rec.errs) != 2 {
		t.Errorf("publishes %v, errors %v", rec.published, rec.errs)
	}
}

type failingPublisher struct{}

func (failingPublisher) PublishResources(context.Context, resourceslice.DriverResources) error {
	return errors.New("no NodeName was set")
}

// TestPrepareResultCarriesMetadata: each prepared device's metadata has its slice
// attributes, the standard PCI bus ID, its CDI name and its device-info fields,
// so an application finds its device without parsing environment variables.
func TestPrepareResultCarriesMetadata(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	vf, vhu, veth := DeviceName(netdevtest.ResVF, "0000:01:01.2"), DeviceName(netdevtest.ResVhost, "vhu0.sock"), f.VethPrefix+"a"
	c := claim("net", node, vf, vhu, veth)
	r := prepare(t, d, c)[c.UID]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	own := func(n string) string { return DefaultDriverName + "/" + n }
	want := []map[string]string{
		{ // the VF
			"resource.kubernetes.io/pciBusID": "0000:01:01.2", own(AttrPCIAddress): "0000:01:01.2",
			own(AttrPFPCIAddress): sysfstest.NodePF, own(AttrPFName): sysfstest.NodePFName, own(AttrDeviceInfoType): "pci",
			own(AttrCDIDevice): "example.com/vf=0000:01:01.2", string(AttrDeviceID): "0000:01:01.2",
			string(AttrResourceName): netdevtest.ResVF, own(AttrType): "pci",
		},
		{ // the vhost-user socket
			own(AttrSocketPath): filepath.Join(f.SockDir, "vhu0.sock"), own(AttrSocketMode): "client",
			own(AttrDeviceInfoType): "vhost-user", own(AttrCDIDevice): "example.com/vhu=vhu0.sock",
		},
		{ // the veth: no device-info, its interface name
			own(AttrInterfaceName): veth, own(AttrType): "netdev", own(AttrCDIDevice): "example.com/veth=" + veth,
		},
	}
	for i, dev := range r.Devices {
		if dev.Metadata == nil {
			t.Fatalf("device %s has no metadata", dev.DeviceName)
		}
		for k, v := range want[i] {
			a, ok := dev.Metadata.Attributes[k]
			if !ok || a.StringValue == nil || *a.StringValue != v {
				t.Errorf("device %s: attribute %s = %v, want %q", dev.DeviceName, k, describe(a), v)
			}
		}
	}
	if _, ok := r.Devices[2].Metadata.Attributes[own(AttrDeviceInfoType)]; ok {
		t.Error("a veth without device-info has a deviceInfoType")
	}
}

func describe(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return "int"
	}
	return "<none>"
}

// TestLongMetadataValuesLeftOut: a value over the API's 64 characters is left out of
// the metadata (kubeletplugin's file would not validate), the rest stays.
func TestLongMetadataValuesLeftOut(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	d.mu.Lock()
	e := d.devices[DeviceName(netdevtest.ResVhost, "vhu1.sock")]
	d.mu.Unlock()
	dev := e.dev
	info := *dev.Info
	vu := *info.VhostUser
	vu.Path = "/" + strings.Repeat("d", 80) + "/vhu1.sock"
	info.VhostUser, dev.Info = &vu, &info
	md := d.metadata(preparedDevice{Resource: netdevtest.ResVhost, CDI: "example.com/vhu=vhu1.sock", Device: dev})
	if _, ok := md.Attributes[DefaultDriverName+"/"+AttrSocketPath]; ok {
		t.Error("a socket path over 64 characters is in the metadata")
	}
	if a := md.Attributes[DefaultDriverName+"/"+AttrSocketMode]; a.StringValue == nil || *a.StringValue != "client" {
		t.Errorf("socketMode %v", describe(a))
	}
}
