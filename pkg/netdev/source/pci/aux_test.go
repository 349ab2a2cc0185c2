package pci

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

const bf2PF, cx6PF = "0000:03:00.0", "0000:5e:00.0"

// bf2 is a node with SFs as the kernel lists them on the auxiliary bus: a
// BlueField-2 PF (15b3:a2d6, mlx5_core, netdev p0, NUMA node 1) with its
// driver's own auxiliary devices (mlx5_core.eth.0, mlx5_core.rdma.0: not
// SFs), SFs mlx5_core.sf.2-5 with sfnums 0, 1, 5, 6 (the name's number is
// the bus's, not the sfnum), sf.3 with RDMA device mlx5_3 and its nested
// mlx5_core.eth.3 (the bus lists it, its parent is the SF), an SF without
// an sfnum (sf.9); a ConnectX-6 Dx PF (15b3:101d, ens5e) with SF
// mlx5_core.sf.7 (sfnum 0); and an Intel VF, which has none.
func bf2(t *testing.T) string {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: bf2PF, Vendor: "15b3", Device: "a2d6", Class: "020000", Driver: "mlx5_core", NUMA: 1, Net: []string{"p0"}})
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: cx6PF, Vendor: "15b3", Device: "101d", Class: "020000", Driver: "mlx5_core", Net: []string{"ens5e"}})
	sysfstest.AddPCI(t, root, sysfstest.E810PF("0000:01:00.0", 0, 1, "ens1f0"))
	sysfstest.AddPCI(t, root, sysfstest.E810VF("0000:01:01.0", "0000:01:00.0", 0))
	for _, a := range []sysfstest.Aux{
		{Name: "mlx5_core.eth.0", Parent: bf2PF, SFNum: -1},
		{Name: "mlx5_core.rdma.0", Parent: bf2PF, SFNum: -1},
		{Name: "mlx5_core.sf.2", Parent: bf2PF, SFNum: 0, Net: []string{"p0sf0"}},
		{Name: "mlx5_core.sf.3", Parent: bf2PF, SFNum: 1, Net: []string{"p0sf1"}, RDMA: []string{"mlx5_3"}},
		{Name: "mlx5_core.sf.4", Parent: bf2PF, SFNum: 5, Net: []string{"p0sf5"}},
		{Name: "mlx5_core.sf.5", Parent: bf2PF, SFNum: 6, Net: []string{"p0sf6"}},
		{Name: "mlx5_core.sf.9", Parent: bf2PF, SFNum: -1},
		{Name: "mlx5_core.sf.7", Parent: cx6PF, SFNum: 0, Net: []string{"ens5esf0"}},
	} {
		sysfstest.AddAux(t, root, a)
	}
	sysfstest.AddNestedAux(t, root, "mlx5_core.sf.3", sysfstest.Aux{Name: "mlx5_core.eth.3", Parent: bf2PF, SFNum: -1})
	sysfstest.AddRDMAChar(t, root, "mlx5_3", 3)
	sysfstest.AddMisc(t, root, "vhost-net", "tun")
	return root
}

func auxScan(t *testing.T, root string, p Pool) []source.Device {
	t.Helper()
	p.Aux = true
	s, err := NewPool(root, p)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

var sf = []string{AuxTypeSF}

// TestAuxSubfunctions: an auxNetDevice pool selects the SFs that sit on
// network functions, by the parent's vendor, device and driver, by pfNames
// and rootDevices with ranges of sfnums, by linkTypes and isRdma; never a
// driver's own auxiliary device, a nested one, an SF without sfnum, or a
// PCI function (and a pool of PCI functions never an SF).
func TestAuxSubfunctions(t *testing.T) {
	root := bf2(t)
	sysfstest.SetAuxLinkType(t, root, "mlx5_core.sf.4", "p0sf5", 32)
	for name, c := range map[string]struct {
		sel  Selectors
		want []string
	}{
		"every SF":             {Selectors{}, []string{"mlx5_core.sf.2", "mlx5_core.sf.3", "mlx5_core.sf.4", "mlx5_core.sf.5", "mlx5_core.sf.7"}},
		"parent's device":      {Selectors{Vendors: []string{"15b3"}, Devices: []string{"a2d6"}, Drivers: []string{"mlx5_core"}}, []string{"mlx5_core.sf.2", "mlx5_core.sf.3", "mlx5_core.sf.4", "mlx5_core.sf.5"}},
		"other driver":         {Selectors{Drivers: []string{"mlx5_ib"}}, nil},
		"README's p0#1-5":      {Selectors{Vendors: []string{"15b3"}, Devices: []string{"a2d6"}, PFNames: []string{"p0#1-5"}}, []string{"mlx5_core.sf.3", "mlx5_core.sf.4"}},
		"pfNames, all":         {Selectors{PFNames: []string{"ens5e"}}, []string{"mlx5_core.sf.7"}},
		"rootDevices #0,6":     {Selectors{RootDevices: []string{bf2PF + "#0,6"}}, []string{"mlx5_core.sf.2", "mlx5_core.sf.5"}},
		"linkTypes":            {Selectors{LinkTypes: []string{"infiniband"}}, []string{"mlx5_core.sf.4"}},
		"isRdma":               {Selectors{IsRDMA: true}, []string{"mlx5_core.sf.3"}},
		"the VF's PF has none": {Selectors{PFNames: []string{"ens1f0"}}, nil},
	} {
		c.sel.AuxTypes = sf
		if got := ids(auxScan(t, root, Pool{Selectors: []Selectors{c.sel}})); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", name, got, c.want)
		}
	}
	s, err := NewPool(root, Pool{Selectors: []Selectors{{Vendors: []string{"15b3"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if devs, err := s.Scan(); err != nil || !reflect.DeepEqual(ids(devs), []string{bf2PF, cx6PF}) {
		t.Errorf("a pool of PCI functions: %v %v, want the PFs alone", ids(devs), err)
	}
}

// TestAuxDeviceDetails: an SF's ID is its name, its NUMA node and parent
// its function's, its RDMA device named, it has no device-info; isRdma gives its RDMA device's
// nodes, needVhostNet vhost-net and tun; excludeTopology hides the node.
func TestAuxDeviceDetails(t *testing.T) {
	root := bf2(t)
	devs := auxScan(t, root, Pool{Selectors: []Selectors{{AuxTypes: sf, IsRDMA: true, NeedVhostNet: true}}})
	if len(devs) != 1 {
		t.Fatalf("%+v", devs)
	}
	d := devs[0]
	var nodes []string
	for _, n := range d.DevNodes {
		nodes = append(nodes, n.HostPath)
	}
	want := []string{"/dev/infiniband/umad3", "/dev/infiniband/issm3", "/dev/infiniband/uverbs3", "/dev/infiniband/rdma_cm", "/dev/vhost-net", "/dev/net/tun"}
	slices.Sort(nodes)
	slices.Sort(want)
	if d.ID != "mlx5_core.sf.3" || d.NUMANode != 1 || *d.Aux != (source.Aux{Parent: bf2PF, RDMADevice: "mlx5_3"}) || d.Info != nil || !d.Healthy || !reflect.DeepEqual(nodes, want) {
		t.Errorf("%+v, nodes %v, want %v", d, nodes, want)
	}
	d = auxScan(t, root, Pool{ExcludeTopology: true, Selectors: []Selectors{{AuxTypes: sf, PFNames: []string{"p0#0"}}}})[0]
	if d.ID != "mlx5_core.sf.2" || d.NUMANode != deviceplugin.NoNUMA || len(d.DevNodes) != 0 {
		t.Errorf("excludeTopology: %+v", d)
	}
}

// TestAuxTakenAndOrder: a pool leaves out the SFs an earlier pool selects;
// the first selector that selects an SF says what it gets.
func TestAuxTakenAndOrder(t *testing.T) {
	root := bf2(t)
	earlier := Pool{Aux: true, Selectors: []Selectors{{AuxTypes: sf, PFNames: []string{"p0#0-1"}}}}
	devs := auxScan(t, root, Pool{Taken: []Pool{earlier}, Selectors: []Selectors{{AuxTypes: sf, PFNames: []string{"p0"}}}})
	if got := ids(devs); !reflect.DeepEqual(got, []string{"mlx5_core.sf.4", "mlx5_core.sf.5"}) {
		t.Errorf("after an earlier pool: %v", got)
	}
	devs = auxScan(t, root, Pool{Selectors: []Selectors{{AuxTypes: sf, PFNames: []string{"p0#1"}}, {AuxTypes: sf, IsRDMA: true}}})
	if len(devs) != 1 || len(devs[0].DevNodes) != 0 {
		t.Errorf("the first selector (no isRdma) says what sf.3 gets: %+v", devs)
	}
}

// TestAuxHealth: an SF deleted stays listed unhealthy and is healthy again
// when it returns; its PF's link down makes it unhealthy.
func TestAuxHealth(t *testing.T) {
	root := bf2(t)
	s, err := NewPool(root, Pool{Aux: true, Selectors: []Selectors{{AuxTypes: sf, PFNames: []string{"ens5e"}}}})
	if err != nil {
		t.Fatal(err)
	}
	health := func() string {
		devs, err := s.Scan()
		if err != nil || len(devs) != 1 {
			t.Fatalf("%+v %v", devs, err)
		}
		return devs[0].Reason
	}
	if r := health(); r != "" {
		t.Fatalf("unhealthy at start: %s", r)
	}
	sysfstest.RemoveAux(t, root, cx6PF, "mlx5_core.sf.7")
	if r := health(); !strings.Contains(r, "gone") {
		t.Errorf("removed SF: %q", r)
	}
	sysfstest.AddAux(t, root, sysfstest.Aux{Name: "mlx5_core.sf.7", Parent: cx6PF, SFNum: 0})
	if r := health(); r != "" {
		t.Errorf("returned SF: %q", r)
	}
	sysfstest.SetOperState(t, root, cx6PF, "ens5e", "down")
	if r := health(); !strings.Contains(r, "ens5e link down") {
		t.Errorf("PF down: %q", r)
	}
}

// TestAuxSelectorErrors: auxTypes are required (only "sf") for a pool of
// auxiliary devices and refused for one of PCI functions; the selectors of
// PCI functions alone are refused; an auxiliary pool holds no accelerators.
func TestAuxSelectorErrors(t *testing.T) {
	root := bf2(t)
	for _, c := range []struct {
		pool Pool
		want string
	}{
		{Pool{Aux: true, Selectors: []Selectors{{}}}, `auxTypes: required for auxiliary devices`},
		{Pool{Aux: true, Selectors: []Selectors{{AuxTypes: []string{"eth"}}}}, `auxTypes: "eth": only "sf"`},
		{Pool{Aux: true, Selectors: []Selectors{{AuxTypes: sf}, {AuxTypes: sf, PCIAddresses: []string{bf2PF}}}}, `selectors[1]: pci source: pciAddresses: selects PCI functions, not auxiliary devices`},
		{Pool{Aux: true, Selectors: []Selectors{{AuxTypes: sf, ACPIIndexes: []string{"1"}}}}, `acpiIndexes: selects PCI functions`},
		{Pool{Aux: true, Selectors: []Selectors{{AuxTypes: sf, VDPAType: "vhost"}}}, `vdpaType: selects PCI functions`},
		{Pool{Aux: true, Selectors: []Selectors{{AuxTypes: sf, PFNames: []string{"p0#2-1"}}}}, `pfNames: "p0#2-1": VF range "2-1" ends before it starts`},
		{Pool{Selectors: []Selectors{{AuxTypes: sf}}}, `auxTypes select auxiliary devices, not PCI functions`},
		{Pool{Aux: true, Accelerator: true, Selectors: []Selectors{{AuxTypes: sf}}}, `holds no accelerators`},
		{Pool{Aux: true, Selectors: []Selectors{{AuxTypes: sf}}, Taken: []Pool{{Aux: true, Selectors: []Selectors{{}}}}}, `an earlier resource's pci source: auxTypes: required`},
	} {
		if _, err := NewPool(root, c.pool); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.pool, err, c.want)
		}
	}
}
