package pci

import (
	"reflect"
	"testing"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

// TestPoolFirstSelectorWins: a device two selectors of a pool select is
// described by the first (here: the RDMA one gives RDMA nodes, the plain
// one none), whatever order the devices come in.
func TestPoolFirstSelectorWins(t *testing.T) {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.E810PF("0000:01:00.0", 0, 2, "ens1f0"))
	rdma := sysfstest.E810VF("0000:01:01.0", "0000:01:00.0", 0)
	rdma.RDMA = []string{"irdma0"}
	sysfstest.AddPCI(t, root, rdma)
	sysfstest.AddPCI(t, root, sysfstest.E810VF("0000:01:01.1", "0000:01:00.0", 0))
	sysfstest.AddRDMAChar(t, root, "irdma0", 0)

	for _, first := range []Selectors{{IsRDMA: true}, {Drivers: []string{"iavf"}}} {
		p, err := NewPool(root, Pool{Selectors: []Selectors{first, {IsRDMA: true}, {Vendors: []string{"8086"}}}})
		if err != nil {
			t.Fatal(err)
		}
		devs, err := p.Scan()
		if err != nil || !reflect.DeepEqual(ids(devs), []string{"0000:01:01.0", "0000:01:01.1"}) {
			t.Fatalf("%v %v", ids(devs), err)
		}
		if got, want := len(devs[0].DevNodes), map[bool]int{true: 4, false: 0}[first.IsRDMA]; got != want {
			t.Errorf("first selector %+v: the RDMA VF got %d nodes, want %d", first, got, want)
		}
	}
}

// TestPoolTaken: a device an earlier resource's pool selects is never this
// pool's, even when this pool's selectors select it.
func TestPoolTaken(t *testing.T) {
	root := fakeNIC(t)
	p, err := NewPool(root, Pool{
		Selectors: []Selectors{{Vendors: []string{"8086", "15b3"}}},
		Taken:     []Pool{{Selectors: []Selectors{{Drivers: []string{"vfio-pci"}}, {Vendors: []string{"15b3"}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if devs, err := p.Scan(); err != nil || !reflect.DeepEqual(ids(devs), []string{"0000:01:01.0"}) {
		t.Fatalf("%v %v", ids(devs), err)
	}
}

// TestPoolAccelerator selects class 0x12 functions only (a PF with VFs
// included), with no device-info; ExcludeTopology hides the NUMA node.
func TestPoolAccelerator(t *testing.T) {
	root := fakeNIC(t)
	qat := sysfstest.PCI{Addr: "0000:3d:00.0", Vendor: "8086", Device: "4940", Class: "120000", Driver: "4xxx", NUMA: 0, NumVFs: 1}
	sysfstest.AddPCI(t, root, qat)
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:3d:00.1", Vendor: "8086", Device: "4941", Class: "120000", Driver: "vfio-pci", NUMA: 0, PF: qat.Addr, IOMMUGroup: "90"})
	p, err := NewPool(root, Pool{Accelerator: true, ExcludeTopology: true, Selectors: []Selectors{{Vendors: []string{"8086"}}}})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := p.Scan()
	if err != nil || !reflect.DeepEqual(ids(devs), []string{"0000:3d:00.0", "0000:3d:00.1"}) {
		t.Fatalf("%v %v", ids(devs), err)
	}
	for _, d := range devs {
		if d.Info != nil || d.NUMANode != deviceplugin.NoNUMA {
			t.Errorf("%s: info %+v NUMA %d", d.ID, d.Info, d.NUMANode)
		}
	}
	if len(devs[1].DevNodes) != 2 {
		t.Errorf("vfio-pci accelerator VF nodes %v", devs[1].DevNodes)
	}
	if _, err := NewPool(root, Pool{}); err == nil {
		t.Error("a pool without selectors was accepted")
	}
}
