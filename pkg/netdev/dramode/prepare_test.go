package dramode

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

func prepare(t *testing.T, d *Driver, claims ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	t.Helper()
	res, err := d.PrepareResourceClaims(context.Background(), claims)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(claims) {
		t.Fatalf("%d results for %d claims", len(res), len(claims))
	}
	return res
}

func unprepare(t *testing.T, d *Driver, claims ...*resourceapi.ResourceClaim) {
	t.Helper()
	var objs []kubeletplugin.NamespacedObject
	for _, c := range claims {
		objs = append(objs, kubeletplugin.NamespacedObject{UID: c.UID, NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
	}
	res, err := d.UnprepareResourceClaims(context.Background(), objs)
	if err != nil {
		t.Fatal(err)
	}
	for uid, err := range res {
		if err != nil {
			t.Errorf("unprepare %s: %v", uid, err)
		}
	}
}

func cdiNames(r kubeletplugin.PrepareResult) []string {
	var out []string
	for _, d := range r.Devices {
		out = append(out, d.CDIDeviceIDs...)
	}
	return out
}

// cdiCache loads the CDI dir with the CDI library, failing on spec errors.
func cdiCache(t *testing.T, dir string) *cdi.Cache {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("CDI errors: %v", errs)
	}
	return cache
}

func TestPrepareWritesAndUnprepareRemoves(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	vf, vhu := DeviceName(netdevtest.ResVF, "0000:01:01.2"), DeviceName(netdevtest.ResVhost, "vhu0.sock")
	c := claim("net", node, vf, vhu, f.VethPrefix+"a")
	// A result of another driver is that driver's to prepare.
	c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.example.com", Pool: node, Device: "gpu0"})
	r := prepare(t, d, c)[c.UID]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	want := []string{"example.com/vf=0000:01:01.2", "example.com/vhu=vhu0.sock", "example.com/veth=" + f.VethPrefix + "a"}
	if got := cdiNames(r); !slices.Equal(got, want) {
		t.Errorf("CDI names %v, want %v", got, want)
	}
	for i, dev := range r.Devices {
		if dev.PoolName != node || dev.DeviceName != c.Status.Allocation.Devices.Results[i].Device || !slices.Equal(dev.Requests, []string{c.Status.Allocation.Devices.Results[i].Request}) {
			t.Errorf("device %d: %+v", i, dev)
		}
	}
	cache := cdiCache(t, f.CDIDir)
	for _, n := range want {
		if cache.GetDevice(n) == nil {
			t.Errorf("CDI device %s not in the CDI specs (%v)", n, cache.ListDevices())
		}
	}
	if n := len(cache.ListDevices()); n != 3 {
		t.Errorf("CDI specs hold %v, want only the prepared devices", cache.ListDevices())
	}
	if vfio := cache.GetDevice(want[0]).ContainerEdits.DeviceNodes; len(vfio) != 2 || vfio[1].Path != "/dev/vfio/42" {
		t.Errorf("VF's CDI device nodes %+v", vfio)
	}
	store := devinfo.NewStore(f.DevInfoDir)
	if info, err := store.ReadDP(netdevtest.ResVF, "0000:01:01.2"); err != nil || info.Pci.PciAddress != "0000:01:01.2" {
		t.Errorf("VF device-info: %+v, %v", info, err)
	}
	if info, err := store.ReadDP(netdevtest.ResVhost, "vhu0.sock"); err != nil || info.VhostUser.Path != filepath.Join(f.SockDir, "vhu0.sock") {
		t.Errorf("vhost-user device-info: %+v, %v", info, err)
	}
	if _, err := store.ReadDP(netdevtest.ResVhost, "vhu1.sock"); err == nil {
		t.Error("a device no claim holds has a device-info file")
	}

	// Idempotent: the kubelet retries.
	if again := prepare(t, d, c)[c.UID]; again.Err != nil || !slices.Equal(cdiNames(again), want) {
		t.Errorf("prepare again: %v %v", again.Err, cdiNames(again))
	}
	unprepare(t, d, c)
	unprepare(t, d, c)
	if left := testenv.Files(t, f.DevInfoDir); len(left) != 0 {
		t.Errorf("device-info files left: %v", left)
	}
	if left := testenv.Files(t, f.CDIDir); len(left) != 0 {
		t.Errorf("CDI specs left: %v", left)
	}
	if left := testenv.Files(t, filepath.Join(f.pluginsDir, DefaultDriverName)); len(left) != 0 {
		t.Errorf("checkpoints left: %v", left)
	}
}

// TestBadClaimsFailAlone: each bad claim gets its own clear error and
// writes nothing; a good claim in the same call is prepared.
func TestBadClaimsFailAlone(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	vf := DeviceName(netdevtest.ResVF, "0000:01:01.0")
	good := claim("good", node, vf)
	unallocated := claim("unalloc", node)
	unallocated.Status.Allocation = nil
	bad := map[*resourceapi.ResourceClaim]string{
		claim("other-node", "node-b", DeviceName(netdevtest.ResVF, "0000:01:01.1")): `device 0000-01-01-1-7739c206 is in pool "node-b", not in this node's pool "node-a"`,
		claim("unknown", node, "no-such-device"):                                    `claim ns/unknown: device "no-such-device" is not in pool "node-a"`,
		claim("taken", node, vf):                                                    `is prepared for claim ns/good (uid-good) already`,
		unallocated:                                                                 "claim ns/unalloc is not allocated",
	}
	all := []*resourceapi.ResourceClaim{good}
	for c := range bad {
		all = append(all, c)
	}
	res := prepare(t, d, all...)
	if res[good.UID].Err != nil {
		t.Errorf("good claim: %v", res[good.UID].Err)
	}
	for c, want := range bad {
		if err := res[c.UID].Err; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("claim %s: error %v, want one containing %q", c.Name, err, want)
		}
	}
	if got := testenv.Files(t, f.DevInfoDir); !slices.Equal(got, []string{"dp/example.com-vf-0000:01:01.0-device.json"}) {
		t.Errorf("device-info files %v: only the good claim's", got)
	}
	if got := testenv.Files(t, filepath.Join(f.pluginsDir, DefaultDriverName, "claims")); !slices.Equal(got, []string{"uid-good.json"}) {
		t.Errorf("checkpoints %v", got)
	}
}

// TestPreparedClaimsSurviveARestart: a new run takes over the claims the
// last one prepared, writes their files again where missing, answers the
// same, keeps their devices held, and unprepares them.
func TestPreparedClaimsSurviveARestart(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	c := claim("net", node, DeviceName(netdevtest.ResVF, "0000:01:01.3"), "vdpa0")
	first := prepare(t, d, c)[c.UID]
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	// Someone removed a file meanwhile.
	if err := devinfo.NewStore(f.DevInfoDir).RemoveDP(netdevtest.ResVDPA, "vdpa0"); err != nil {
		t.Fatal(err)
	}

	d2 := f.driver()
	if _, err := devinfo.NewStore(f.DevInfoDir).ReadDP(netdevtest.ResVDPA, "vdpa0"); err != nil {
		t.Errorf("device-info of a prepared claim not written again at start: %v", err)
	}
	again := prepare(t, d2, c)[c.UID]
	if again.Err != nil || !slices.Equal(cdiNames(again), cdiNames(first)) {
		t.Errorf("after restart: %v %v, want %v", again.Err, cdiNames(again), cdiNames(first))
	}
	other := claim("other", node, "vdpa0")
	if err := prepare(t, d2, other)[other.UID].Err; err == nil {
		t.Error("a device held by a claim prepared before the restart was prepared again")
	}
	unprepare(t, d2, c)
	if left := testenv.Files(t, f.DevInfoDir); len(left) != 0 {
		t.Errorf("device-info files left: %v", left)
	}
	if left := testenv.Files(t, f.CDIDir); len(left) != 0 {
		t.Errorf("CDI specs left: %v", left)
	}
}

func TestCorruptCheckpointFailsTheStart(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(f.pluginsDir, DefaultDriverName, "claims")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(f.Config, Options{NodeName: node, PluginsDir: f.pluginsDir}, nil); err == nil || !strings.Contains(err.Error(), "x.json") {
		t.Errorf("corrupt checkpoint: %v", err)
	}
}
