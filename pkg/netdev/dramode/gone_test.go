package dramode

import (
	"slices"
	"testing"

	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

// The VFs leave sysfs (sriov_numvfs -> 0): those no prepared claim holds leave the
// slice; the one a prepared claim holds stays, tainted, reported unhealthy, with its
// claim's files, until the claim is unprepared, then it leaves too. VFs that come back
// are published again, untainted.
func TestGoneDevicesLeaveTheSliceUnlessPrepared(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	vfs := []string{"0000:01:01.0", "0000:01:01.1"}
	names := []string{DeviceName(netdevtest.ResVF, vfs[0]), DeviceName(netdevtest.ResVF, vfs[1])}
	c := claim("net", node, names[1])
	if err := prepare(t, d, c)[c.UID].Err; err != nil {
		t.Fatal(err)
	}
	for _, vf := range vfs {
		sysfstest.RemovePCI(t, f.Sysfs, vf)
	}
	mustSync(t, d)
	pub := published(t, d)
	if _, ok := pub[names[0]]; ok {
		t.Errorf("free VF %s gone from sysfs is still published", vfs[0])
	}
	if got := tainted(t, d); !slices.Equal(got, names[1:]) {
		t.Errorf("tainted %v, want the held VF %s", got, names[1])
	}
	if report, _ := d.healthReport(); unhealthy(report)[names[1]] == "" {
		t.Errorf("the held VF is not reported unhealthy: %v", unhealthy(report))
	}
	if _, err := d.store.ReadDP(netdevtest.ResVF, vfs[1]); err != nil {
		t.Errorf("the held VF's device-info: %v", err)
	}

	unprepare(t, d, c)
	mustSync(t, d)
	if _, ok := published(t, d)[names[1]]; ok {
		t.Errorf("VF %s still published once its claim is unprepared", vfs[1])
	}
	for i, vf := range vfs {
		sysfstest.AddPCI(t, f.Sysfs, sysfstest.E810VF(vf, sysfstest.NodePF, i))
	}
	mustSync(t, d)
	pub = published(t, d)
	for _, n := range names {
		if _, ok := pub[n]; !ok {
			t.Errorf("VF %s back in sysfs is not published", n)
		}
	}
	if got := tainted(t, d); len(got) != 0 {
		t.Errorf("tainted %v, want none", got)
	}
}

func mustSync(t *testing.T, d *Driver) {
	t.Helper()
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
}
