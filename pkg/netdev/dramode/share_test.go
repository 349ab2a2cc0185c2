package dramode

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
)

// shareFixture is the fixture with its veth resource shareable: 1 Gbit/s
// in shares of 100M steps, at most 3 per device.
func shareFixture(t *testing.T) *fixture {
	f := newFixture(t)
	f.Config.Resources[1].Share = &netshare.Config{Interfaces: 3,
		Bandwidth: netshare.Bandwidth{Total: "1G", Default: "100M", Step: "100M"}}
	return f
}

// publishedDevice is the driver's published device named name.
func publishedDevice(t *testing.T, d *Driver, name string) resourceapi.Device {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.published.Pools[node].Slices {
		for _, dev := range s.Devices {
			if dev.Name == name {
				return dev
			}
		}
	}
	t.Fatalf("device %s is not published", name)
	return resourceapi.Device{}
}

// A shareable device is published once, for many allocations, with the
// bandwidth and interfaces capacities and their request policies.
func TestShareablePublished(t *testing.T) {
	f := shareFixture(t)
	d := f.driver()
	dev := publishedDevice(t, d, f.VethPrefix+"a")
	if dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations {
		t.Fatal("allowMultipleAllocations is not set")
	}
	bw, ifs := dev.Capacity[netshare.CapBandwidth], dev.Capacity[netshare.CapInterfaces]
	if bw.Value.String() != "1G" || bw.RequestPolicy.Default.String() != "100M" ||
		bw.RequestPolicy.ValidRange.Min.String() != "100M" || bw.RequestPolicy.ValidRange.Step.String() != "100M" ||
		bw.RequestPolicy.ValidRange.Max.String() != "1G" {
		t.Errorf("bandwidth capacity %+v, policy %+v", bw.Value, bw.RequestPolicy.ValidRange)
	}
	if ifs.Value.String() != "3" || ifs.RequestPolicy.Default.String() != "1" || len(ifs.RequestPolicy.ValidValues) != 1 {
		t.Errorf("interfaces capacity %+v", ifs)
	}
	// The other resources' devices stay whole.
	if vf := publishedDevice(t, d, DeviceName(netdevtest.ResVF, "0000:01:01.0")); vf.AllowMultipleAllocations != nil || vf.Capacity != nil {
		t.Errorf("a VF is shareable: %+v", vf)
	}
}

// A share's total may not be more than its link carries: the device is
// left out and the problem names the link and both numbers.
func TestShareableOverLinkSpeed(t *testing.T) {
	f := shareFixture(t)
	veth := f.VethPrefix + "a"
	dir := filepath.Join(f.Sysfs, "class", "net", veth)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "speed"), []byte("100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := f.driver()
	if _, ok := published(t, d)[veth]; ok {
		t.Fatal("a device whose link is slower than its share total is published")
	}
	want := "device " + veth + " of " + netdevtest.ResVeth + " is left out: share.bandwidth.total 1G is more than its link " + veth + " carries (100M)"
	if !slices.ContainsFunc(d.problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
		t.Errorf("problems %q, want one starting %q", d.problems, want)
	}
}

// shareClaim is a claim holding a share of the veth device, as the
// scheduler allocates it.
func shareClaim(name, device, shareID, bandwidth string) *resourceapi.ResourceClaim {
	c := claim(name, node, device)
	r := &c.Status.Allocation.Devices.Results[0]
	if shareID != "" {
		id := types.UID(shareID)
		r.ShareID = &id
	}
	if bandwidth != "" {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
			netshare.CapBandwidth: resource.MustParse(bandwidth), netshare.CapInterfaces: resource.MustParse("1")}
	}
	return c
}

// Two claims sharing one device each get their own CDI device with the
// share's parent, ID and bandwidth; unprepare of one leaves the other's.
// A restarted driver takes both over.
func TestSharePrepare(t *testing.T) {
	f := shareFixture(t)
	d := f.driver()
	veth := f.VethPrefix + "a"
	a := shareClaim("a", veth, "0b7e3c1a-0000-4000-8000-000000000001", "300M")
	b := shareClaim("b", veth, "0b7e3c1a-0000-4000-8000-000000000002", "100M")
	res := prepare(t, d, a, b)
	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		if res[c.UID].Err != nil {
			t.Fatalf("prepare %s: %v", c.Name, res[c.UID].Err)
		}
	}
	idA := netshare.DeviceID(veth, "0b7e3c1a-0000-4000-8000-000000000001")
	if got := cdiNames(res[a.UID]); len(got) != 1 || got[0] != "example.com/veth="+cdispec.DeviceName(idA) {
		t.Fatalf("claim a's CDI devices %v", got)
	}
	if sid := res[a.UID].Devices[0].ShareID; sid == nil || *sid != "0b7e3c1a-0000-4000-8000-000000000001" {
		t.Errorf("claim a's device has share ID %v, want the allocation's", sid)
	}
	env := cdiEnv(t, f.CDIDir, idA)
	prefix := cdispec.EnvName(netdevtest.ResVeth, idA)
	for _, want := range []string{prefix + "=" + idA, prefix + "_PARENT=" + veth, prefix + "_INTERFACE=" + veth,
		prefix + "_SHARE_ID=0b7e3c1a-0000-4000-8000-000000000001", prefix + "_BANDWIDTH=300000000"} {
		if !slices.Contains(env, want) {
			t.Errorf("CDI env %q lacks %q", env, want)
		}
	}
	unprepare(t, d, a)
	if got := cdiDevices(t, f.CDIDir); len(got) != 1 {
		t.Fatalf("after unprepare of a, CDI devices %v, want b's alone", got)
	}
	d2 := f.driver()
	if got := cdiNames(prepare(t, d2, b)[b.UID]); len(got) != 1 {
		t.Fatalf("restarted driver: b's CDI devices %v", got)
	}
	unprepare(t, d2, b)
	if got := cdiDevices(t, f.CDIDir); len(got) != 0 {
		t.Fatalf("after unprepare of both, CDI devices %v", got)
	}
}

// A share the driver cannot prepare is an error that says why, and leaves
// nothing: no CDI device, no checkpoint.
func TestSharePrepareErrors(t *testing.T) {
	f := shareFixture(t)
	d := f.driver()
	veth := f.VethPrefix + "a"
	for _, tc := range []struct {
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{shareClaim("whole", veth, "", ""), "its allocation has no share ID"},
		{shareClaim("badid", veth, "../../etc", "100M"), `share ID "../../etc" cannot name a device`},
		{shareClaim("nobw", veth, "0b7e3c1a-0000-4000-8000-000000000003", ""), "consumed no bandwidth capacity"},
		{shareClaim("binary", veth, "0b7e3c1a-0000-4000-8000-000000000004", "100Mi"), "bandwidth 100Mi is not a whole number of Mbit/s"},
	} {
		err := prepare(t, d, tc.claim)[tc.claim.UID].Err
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "claim ns/"+tc.claim.Name) {
			t.Errorf("claim %s: %v, want an error naming it with %q", tc.claim.Name, err, tc.want)
		}
	}
	if got := cdiDevices(t, f.CDIDir); len(got) != 0 {
		t.Errorf("CDI devices %v left behind", got)
	}
	if recs, err := d.claims.load(); err != nil || len(recs) != 0 {
		t.Errorf("checkpoints %v, %v left behind", recs, err)
	}
}

// cdiDevices are the CDI devices the dir's specs hold.
func cdiDevices(t *testing.T, dir string) []string {
	t.Helper()
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	return cdiCache(t, dir).ListDevices()
}

// cdiEnv is the environment of the CDI device for device ID id.
func cdiEnv(t *testing.T, dir, id string) []string {
	t.Helper()
	dev := cdiCache(t, dir).GetDevice("example.com/veth=" + cdispec.DeviceName(id))
	if dev == nil {
		t.Fatalf("no CDI device for %s", id)
	}
	return dev.ContainerEdits.Env
}
