package pci

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

// eightVFs builds PF 0000:03:00.0 (netdev eth0, ACPI index 101) with eight
// VFs whose addresses run against their index (VF i is 0000:03:(0x17-i).0), so
// a test passes only when the index is read from the PF's virtfnN links;
// and PF 0000:04:00.0 (netdev eth1) with two VFs.
func eightVFs(t *testing.T) string {
	root := t.TempDir()
	pf := sysfstest.E810PF("0000:03:00.0", 0, 8, "eth0")
	pf.ACPIIndex = "101"
	sysfstest.AddPCI(t, root, pf)
	for i := range 8 {
		vf := sysfstest.E810VF(vfAddr(i), "0000:03:00.0", 0)
		vf.ACPIIndex = fmt.Sprint(200 + i)
		sysfstest.AddPCI(t, root, vf)
	}
	sysfstest.AddPCI(t, root, sysfstest.E810PF("0000:04:00.0", 0, 2, "eth1"))
	sysfstest.AddPCI(t, root, sysfstest.E810VF("0000:04:01.0", "0000:04:00.0", 0))
	sysfstest.AddPCI(t, root, sysfstest.E810VF("0000:04:01.1", "0000:04:00.0", 0))
	return root
}

func vfAddr(i int) string { return fmt.Sprintf("0000:03:%02x.0", 0x17-i) }

func vfAddrs(idx ...int) []string {
	var out []string
	for i := len(idx) - 1; i >= 0; i-- { // sorted by address: the highest index first
		out = append(out, vfAddr(idx[i]))
	}
	return out
}

func scanIDs(t *testing.T, root string, sel Selectors) []string {
	t.Helper()
	devs, err := mustNew(t, root, sel).Scan()
	if err != nil {
		t.Fatal(err)
	}
	return ids(devs)
}

// TestVFRanges: pfNames and rootDevices with the SR-IOV device plugin's VF
// ranges (0-based, inclusive; a bare PF is all its VFs), the PF named by
// netdev or by PCI address (without regard to case), never the PF itself.
func TestVFRanges(t *testing.T) {
	root := eightVFs(t)
	cases := []struct {
		sel  Selectors
		want []string
	}{
		{Selectors{PFNames: []string{"eth0#0,2-7"}}, vfAddrs(0, 2, 3, 4, 5, 6, 7)},
		{Selectors{PFNames: []string{"eth0#1"}}, vfAddrs(1)},
		{Selectors{PFNames: []string{"eth0#6-9"}}, vfAddrs(6, 7)},
		{Selectors{PFNames: []string{"eth0"}}, vfAddrs(0, 1, 2, 3, 4, 5, 6, 7)},
		{Selectors{PFNames: []string{"ETH1"}}, []string{"0000:04:01.0", "0000:04:01.1"}},
		{Selectors{PFNames: []string{"eth0#3", "eth1#1"}}, append(vfAddrs(3), "0000:04:01.1")},
		{Selectors{RootDevices: []string{"0000:03:00.0#0-1,3"}}, vfAddrs(0, 1, 3)},
		{Selectors{RootDevices: []string{"0000:04:00.0"}}, []string{"0000:04:01.0", "0000:04:01.1"}},
		{Selectors{RootDevices: []string{"0000:03:00.0#0-3"}, PFNames: []string{"eth0#2-5"}}, vfAddrs(2, 3)},
		{Selectors{PFNames: []string{"eth9"}}, nil},
	}
	for _, c := range cases {
		if got := scanIDs(t, root, c.sel); !reflect.DeepEqual(got, c.want) {
			t.Errorf("pfNames %v rootDevices %v: got %v, want %v", c.sel.PFNames, c.sel.RootDevices, got, c.want)
		}
	}
}

// TestPCIAddressesAndACPIIndexes select single functions, a PF (without VFs
// configured) included.
func TestPCIAddressesAndACPIIndexes(t *testing.T) {
	root := eightVFs(t)
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:05:00.0", Vendor: "8086", Device: "1592", Class: "020000", Driver: "ice", Net: []string{"eth5"}, ACPIIndex: "105"})
	cases := []struct {
		sel  Selectors
		want []string
	}{
		{Selectors{PCIAddresses: []string{vfAddr(2), "0000:04:01.1"}}, []string{vfAddr(2), "0000:04:01.1"}},
		{Selectors{PCIAddresses: []string{"0000:05:00.0"}}, []string{"0000:05:00.0"}},
		{Selectors{PCIAddresses: []string{"0000:03:00.0"}}, nil}, // a PF with VFs configured is never a device
		{Selectors{ACPIIndexes: []string{"105", "203"}}, []string{vfAddr(3), "0000:05:00.0"}},
		{Selectors{ACPIIndexes: []string{"203"}, PFNames: []string{"eth1"}}, nil},
	}
	for _, c := range cases {
		if got := scanIDs(t, root, c.sel); !reflect.DeepEqual(got, c.want) {
			t.Errorf("pciAddresses %v acpiIndexes %v: got %v, want %v", c.sel.PCIAddresses, c.sel.ACPIIndexes, got, c.want)
		}
	}
}

// TestIsRDMA: a VF with its own RDMA device (a child of the PCI function)
// and one with soft-RoCE on its netdev are selected, with their
// /dev/infiniband nodes and rdma-device in the device-info; a VF without
// RDMA is not. Without isRdma the RDMA VF gets no RDMA nodes.
func TestIsRDMA(t *testing.T) {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.E810PF("0000:01:00.0", 0, 3, "ens1f0"))
	own := sysfstest.E810VF("0000:01:01.0", "0000:01:00.0", 0)
	own.RDMA = []string{"irdma1"}
	sysfstest.AddPCI(t, root, own)
	soft := sysfstest.E810VF("0000:01:01.1", "0000:01:00.0", 0)
	soft.Net = []string{"ens1f0v1"}
	sysfstest.AddPCI(t, root, soft)
	sysfstest.AddPCI(t, root, sysfstest.E810VF("0000:01:01.2", "0000:01:00.0", 0))
	sysfstest.AddRDMAChar(t, root, "irdma1", 0)
	sysfstest.AddSoftRoCE(t, root, "rxe0", "ens1f0v1")
	sysfstest.AddRDMAChar(t, root, "rxe0", 1)

	devs, err := mustNew(t, root, Selectors{IsRDMA: true}).Scan()
	if err != nil || !reflect.DeepEqual(ids(devs), []string{"0000:01:01.0", "0000:01:01.1"}) {
		t.Fatalf("isRdma selected %v (%v)", ids(devs), err)
	}
	for i, ibdev := range []string{"irdma1", "rxe0"} {
		want := []source.DevNode{rw(fmt.Sprintf("/dev/infiniband/issm%d", i)), rw(fmt.Sprintf("/dev/infiniband/umad%d", i)),
			rw(fmt.Sprintf("/dev/infiniband/uverbs%d", i)), rw("/dev/infiniband/rdma_cm")}
		if !reflect.DeepEqual(devs[i].DevNodes, want) {
			t.Errorf("%s nodes %v, want %v", devs[i].ID, devs[i].DevNodes, want)
		}
		if got := devs[i].Info.Pci.RdmaDevice; got != ibdev {
			t.Errorf("%s rdma-device %q, want %q", devs[i].ID, got, ibdev)
		}
	}
	plain, _ := mustNew(t, root, Selectors{PCIAddresses: []string{"0000:01:01.0"}}).Scan()
	if len(plain) != 1 || plain[0].DevNodes != nil {
		t.Errorf("without isRdma: %+v", plain)
	}
}

// TestUIO: a device bound to a UIO driver gets its /dev/uioN.
func TestUIO(t *testing.T) {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.E810PF("0000:01:00.0", 0, 1, "ens1f0"))
	vf := sysfstest.E810VF("0000:01:01.0", "0000:01:00.0", 0)
	vf.Driver, vf.UIO = "igb_uio", "uio3"
	sysfstest.AddPCI(t, root, vf)
	devs, err := mustNew(t, root, Selectors{Drivers: []string{"igb_uio"}}).Scan()
	if err != nil || len(devs) != 1 || !reflect.DeepEqual(devs[0].DevNodes, []source.DevNode{rw("/dev/uio3")}) {
		t.Fatalf("%+v %v", devs, err)
	}
}

// TestNeedVhostNet adds /dev/vhost-net and /dev/net/tun to every device
// when the host has both, and neither when it lacks one (a container cannot
// start with a node the host lacks).
func TestNeedVhostNet(t *testing.T) {
	root := fakeNIC(t)
	sysfstest.AddMisc(t, root, "vhost-net")
	without, _ := mustNew(t, root, Selectors{Drivers: []string{"iavf"}, NeedVhostNet: true}).Scan()
	if len(without) != 1 || without[0].DevNodes != nil {
		t.Fatalf("without tun: %+v", without)
	}
	sysfstest.AddMisc(t, root, "tun")
	devs, err := mustNew(t, root, Selectors{Drivers: []string{"iavf", "vfio-pci"}, NeedVhostNet: true}).Scan()
	if err != nil || len(devs) != 2 {
		t.Fatalf("%v %v", ids(devs), err)
	}
	want := []source.DevNode{rw("/dev/vhost-net"), rw("/dev/net/tun")}
	if !reflect.DeepEqual(devs[0].DevNodes, want) || !reflect.DeepEqual(devs[1].DevNodes[2:], want) {
		t.Errorf("nodes %v / %v", devs[0].DevNodes, devs[1].DevNodes)
	}
}

// TestVDPAType selects the VFs with a vDPA device of that type; the device
// stays the VF (its PCI address), described by a vdpa device-info, with the
// vhost-vdpa node for vhost.
func TestVDPAType(t *testing.T) {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:65:00.0", Vendor: "15b3", Device: "101d", Class: "020000", Driver: "mlx5_core", NumVFs: 2, Net: []string{"ens65f0"}})
	for i, drv := range []string{"vhost_vdpa", "virtio_vdpa"} {
		addr := fmt.Sprintf("0000:65:00.%d", i+2)
		sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: addr, Vendor: "15b3", Device: "101e", Class: "020000", Driver: "mlx5_core", PF: "0000:65:00.0", NUMA: 1})
		sysfstest.AddVDPA(t, root, fmt.Sprintf("vdpa%d", i), addr, drv, i+3)
	}
	vhost, err := mustNew(t, root, Selectors{VDPAType: "vhost"}).Scan()
	if err != nil || !reflect.DeepEqual(ids(vhost), []string{"0000:65:00.2"}) {
		t.Fatalf("vhost: %v %v", ids(vhost), err)
	}
	want := &devinfo.VdpaDevice{ParentDevice: "vdpa0", Driver: "vhost", Path: "/dev/vhost-vdpa-3", PciAddress: "0000:65:00.2", PfPciAddress: "0000:65:00.0"}
	if got := vhost[0]; got.Info.Type != devinfo.TypeVDPA || !reflect.DeepEqual(got.Info.Vdpa, want) || !reflect.DeepEqual(got.DevNodes, []source.DevNode{rw("/dev/vhost-vdpa-3")}) || got.NUMANode != 1 {
		t.Errorf("vhost device %+v info %+v", got, got.Info.Vdpa)
	}
	if devinfo.Validate(vhost[0].Info) != nil {
		t.Errorf("vdpa device-info invalid: %v", devinfo.Validate(vhost[0].Info))
	}
	virtio, err := mustNew(t, root, Selectors{VDPAType: "virtio"}).Scan()
	if err != nil || !reflect.DeepEqual(ids(virtio), []string{"0000:65:00.3"}) || virtio[0].DevNodes != nil {
		t.Fatalf("virtio: %+v %v", virtio, err)
	}
}

// TestSelectorErrors: every malformed selector is refused at start, saying
// which selector and what form it takes.
func TestSelectorErrors(t *testing.T) {
	cases := []struct {
		sel  Selectors
		want string
	}{
		{Selectors{PCIAddresses: []string{"01:00.1"}}, `pciAddresses: "01:00.1" is not a PCI address`},
		{Selectors{PCIAddresses: []string{"0000:01:00.A"}}, `pciAddresses: "0000:01:00.A"`},
		{Selectors{ACPIIndexes: []string{"0x65"}}, `acpiIndexes: "0x65" is not an ACPI index`},
		{Selectors{ACPIIndexes: []string{"007"}}, `acpiIndexes: "007"`},
		{Selectors{PFNames: []string{"eth0#3-1"}}, `pfNames: "eth0#3-1": VF range "3-1" ends before it starts`},
		{Selectors{PFNames: []string{"eth0#a"}}, `pfNames: "eth0#a": VF range "a" is not an index`},
		{Selectors{PFNames: []string{"eth0#1,"}}, `VF range "" is not an index`},
		{Selectors{PFNames: []string{"eth0#1-2-3"}}, `VF range "1-2-3"`},
		{Selectors{PFNames: []string{"eth0#-1"}}, `VF range "-1"`},
		{Selectors{PFNames: []string{"#0-3"}}, `pfNames: "#0-3": no PF before the VF ranges`},
		{Selectors{PFNames: []string{"eth0#0", "eth0#2"}}, `pfNames: "eth0#2": PF eth0 is named twice`},
		{Selectors{RootDevices: []string{"0000:01:00.0#x"}}, `rootDevices: "0000:01:00.0#x"`},
		{Selectors{VDPAType: "vduse"}, `vdpaType "vduse" is not "vhost" or "virtio"`},
		{Selectors{VDPAType: "vhost", IsRDMA: true}, "isRdma and vdpaType exclude each other"},
		{Selectors{LinkTypes: []string{""}}, "linkTypes: empty name"},
	}
	for _, c := range cases {
		_, err := New("", c.sel)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "pci source: ") {
			t.Errorf("%+v: got %v, want an error containing %q", c.sel, err, c.want)
		}
	}
}
