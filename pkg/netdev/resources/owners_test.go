package resources

import (
	"strings"
	"testing"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

func dev(id, pciAddr string) source.Device {
	d := source.Device{Device: deviceplugin.Device{ID: id, Healthy: true}}
	if pciAddr != "" {
		d.Info = &devinfo.DeviceInfo{Pci: &devinfo.PciDevice{PciAddress: pciAddr}}
	}
	return d
}

// TestAssignComparesHostObjects: a netdev backed by a PCI function and that
// function collide across resources; the first resource keeps it until it
// no longer lists it, and the start refuses the overlap naming both.
func TestAssignComparesHostObjects(t *testing.T) {
	o := NewOwners()
	if kept, c := o.Assign("example.com/vf", "pci", []source.Device{dev("0000:01:01.0", "0000:01:01.0")}); len(kept) != 1 || len(c) != 0 {
		t.Fatalf("first resource: kept %v, conflicts %v", kept, c)
	}
	kept, c := o.Assign("example.com/eth", "netdevs", []source.Device{dev("ens1f0v0", "0000:01:01.0"), dev("eth9", "")})
	if len(kept) != 1 || kept[0].ID != "eth9" || len(c) != 1 {
		t.Fatalf("second resource: kept %v, conflicts %v", kept, c)
	}
	err := OverlapError(c, "pods")
	if err == nil || !strings.Contains(err.Error(), "example.com/vf and example.com/eth both select PCI device 0000:01:01.0") ||
		!strings.Contains(err.Error(), "two pods at once") {
		t.Errorf("OverlapError: %v", err)
	}
	if err := OverlapError(nil, "pods"); err != nil {
		t.Errorf("OverlapError without conflicts: %v", err)
	}
	o.Assign("example.com/vf", "pci", nil)
	if kept, c := o.Assign("example.com/eth", "netdevs", []source.Device{dev("ens1f0v0", "0000:01:01.0")}); len(kept) != 1 || len(c) != 0 {
		t.Errorf("after the first let go: kept %v, conflicts %v", kept, c)
	}
}
