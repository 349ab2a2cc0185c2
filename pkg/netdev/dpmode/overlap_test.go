package dpmode

import (
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// listSource is a source whose devices the test sets.
type listSource struct {
	mu   sync.Mutex
	devs []source.Device
}

func (p *listSource) Kind() string { return "netdevs" }

func (p *listSource) Scan() ([]source.Device, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.devs), nil
}

func (p *listSource) set(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.devs = nil
	for _, id := range ids {
		p.devs = append(p.devs, source.Device{Device: deviceplugin.Device{ID: id, Healthy: true, NUMANode: deviceplugin.NoNUMA}})
	}
}

func advertised(r *resource) []string {
	var ids []string
	for _, d := range r.dp.Devices() {
		ids = append(ids, d.ID)
	}
	return ids
}

// TestDeviceAppearingUnderTwoResources: a device that shows up later under
// two resources (VFs created after the start, matched by a PCI source and a
// netdev glob) is advertised by one of them only, and goes to the other
// when the first no longer has it.
func TestDeviceAppearingUnderTwoResources(t *testing.T) {
	dir := t.TempDir()
	own := resources.NewOwners()
	mk := func(name string, source *listSource) *resource {
		w, err := cdispec.New(dir+"/cdi", name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := newResource(name, source, dir+"/dp", w, devinfo.NewStore(dir+"/di"), own, slog.Default(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pa, pb := &listSource{}, &listSource{}
	a, b := mk("example.com/a", pa), mk("example.com/b", pb)
	syncAll := func() {
		t.Helper()
		for _, r := range []*resource{a, b} {
			if err := r.sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	pa.set("eth0", "shared")
	pb.set("shared", "eth9")
	syncAll()
	if got := advertised(a); !slices.Equal(got, []string{"eth0", "shared"}) {
		t.Errorf("a advertises %v", got)
	}
	if got := advertised(b); !slices.Equal(got, []string{"eth9"}) {
		t.Errorf("b advertises %v, want the shared device left out", got)
	}
	if len(b.conflicts) != 1 {
		t.Errorf("b conflicts %v", b.conflicts)
	}
	pa.set("eth0")
	syncAll()
	if got := advertised(b); !slices.Equal(got, []string{"eth9", "shared"}) {
		t.Errorf("b advertises %v once a let the shared device go", got)
	}
	syncAll()
	if got := advertised(a); !slices.Equal(got, []string{"eth0"}) {
		t.Errorf("a advertises %v", got)
	}
}
