package dramode

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

// poolCounters are the counter sets of the driver's pool, by name, and
// whether a slice held both devices and counters.
func poolCounters(t *testing.T, d *Driver) map[string]resourceapi.CounterSet {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]resourceapi.CounterSet{}
	for _, s := range d.published.Pools[node].Slices {
		if len(s.SharedCounters) > 0 && len(s.Devices) > 0 {
			t.Error("a slice holds devices and counters: the API refuses it")
		}
		for _, cs := range s.SharedCounters {
			out[cs.Name] = cs
		}
	}
	return out
}

// With pfBandwidth, the PF's bandwidth is a counter set of the pool and
// each VF consumes perVF of it; without a total, the PF link's speed.
func TestVFsConsumeTheirPFsBandwidth(t *testing.T) {
	for _, tc := range []struct {
		total, speed, want string
	}{{"10G", "", "10G"}, {"", "25000", "25G"}} {
		f := newFixture(t)
		f.Config.Resources[0].PFBandwidth = &netshare.PFBandwidth{Total: tc.total, PerVF: "4G"}
		if tc.speed != "" {
			dir := filepath.Join(f.Sysfs, "class", "net", sysfstest.NodePFName)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "speed"), []byte(tc.speed+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		d := f.driver()
		sets := poolCounters(t, d)
		cs, ok := sets["pf-0000-01-00-0"]
		if len(sets) != 1 || !ok || qty(cs.Counters[netshare.CounterBandwidth]) != tc.want {
			t.Fatalf("total %q, speed %q: counter sets %+v, want pf-0000-01-00-0 with %s", tc.total, tc.speed, sets, tc.want)
		}
		for i := range 4 {
			dev := publishedDevice(t, d, DeviceName(netdevtest.ResVF, "0000:01:01."+string(rune('0'+i))))
			if len(dev.ConsumesCounters) != 1 || dev.ConsumesCounters[0].CounterSet != "pf-0000-01-00-0" ||
				qty(dev.ConsumesCounters[0].Counters[netshare.CounterBandwidth]) != "4G" {
				t.Errorf("VF %d consumes %+v", i, dev.ConsumesCounters)
			}
		}
	}
}

// A PF that reports no speed and has no total keeps its VFs out, saying so.
func TestVFsOfAPFWithoutSpeed(t *testing.T) {
	f := newFixture(t)
	f.Config.Resources[0].PFBandwidth = &netshare.PFBandwidth{PerVF: "4G"}
	d := f.driver()
	if len(poolCounters(t, d)) != 0 {
		t.Error("counter sets published for a PF without a bandwidth")
	}
	want := "reports no link speed: set pfBandwidth.total"
	if !slices.ContainsFunc(d.problems, func(p string) bool { return strings.Contains(p, want) }) {
		t.Errorf("problems %q, want one with %q", d.problems, want)
	}
}

func qty(c resourceapi.Counter) string { return c.Value.String() }
