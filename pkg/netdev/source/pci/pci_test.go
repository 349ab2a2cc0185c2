package pci

import (
	"reflect"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

// fakeNIC builds a PF with VFs configured (one VF on iavf with RDMA, one on
// vfio-pci), a plain PF without VFs, and a non-network device.
func fakeNIC(t *testing.T) string {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.E810PF("0000:01:00.0", 1, 2, "ens1f0"))
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:01:01.0", Vendor: "8086", Device: "1889", Class: "020000", Driver: "iavf", NUMA: 1, PF: "0000:01:00.0", Net: []string{"ens1f0v0"}, RDMA: []string{"irdma1"}})
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:01:01.1", Vendor: "8086", Device: "1889", Class: "020000", Driver: "vfio-pci", NUMA: 1, PF: "0000:01:00.0", IOMMUGroup: "42"})
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:02:00.0", Vendor: "15b3", Device: "1017", Class: "020000", Driver: "mlx5_core", NUMA: -1, Net: []string{"ens2"}})
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:00:1f.2", Vendor: "8086", Device: "a102", Class: "010601", Driver: "ahci"})
	return root
}

func ids(devs []source.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.ID)
	}
	return out
}

func TestSelectors(t *testing.T) {
	root := fakeNIC(t)
	cases := []struct {
		sel  Selectors
		want []string
	}{
		{Selectors{}, []string{"0000:01:01.0", "0000:01:01.1", "0000:02:00.0"}},
		{Selectors{Vendors: []string{"8086"}}, []string{"0000:01:01.0", "0000:01:01.1"}},
		{Selectors{Drivers: []string{"vfio-pci"}}, []string{"0000:01:01.1"}},
		{Selectors{PFNames: []string{"ens1f0"}}, []string{"0000:01:01.0", "0000:01:01.1"}},
		{Selectors{PFNames: []string{"ens2"}}, nil}, // a PF is not its own VF: select it by pciAddresses
		{Selectors{PCIAddresses: []string{"0000:02:00.0"}}, []string{"0000:02:00.0"}},
		{Selectors{Devices: []string{"1889"}, LinkTypes: []string{"ether"}}, []string{"0000:01:01.0", "0000:01:01.1"}},
		{Selectors{LinkTypes: []string{"infiniband"}}, nil},
	}
	for _, c := range cases {
		devs, err := mustNew(t, root, c.sel).Scan()
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(devs); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: got %v, want %v", c.sel, got, c.want)
		}
	}
}

func TestDeviceDetails(t *testing.T) {
	root := fakeNIC(t)
	devs, err := mustNew(t, root, Selectors{PFNames: []string{"ens1f0"}}).Scan()
	if err != nil {
		t.Fatal(err)
	}
	vf, vfio := devs[0], devs[1]
	if !vf.Healthy || vf.NUMANode != 1 || vf.DevNodes != nil {
		t.Errorf("VF %+v", vf)
	}
	want := &devinfo.PciDevice{PciAddress: "0000:01:01.0", PfPciAddress: "0000:01:00.0", RdmaDevice: "irdma1"}
	if !reflect.DeepEqual(vf.Info.Pci, want) || devinfo.Validate(vf.Info) != nil {
		t.Errorf("VF info %+v: %v", vf.Info.Pci, devinfo.Validate(vf.Info))
	}
	wantNodes := []source.DevNode{
		{HostPath: "/dev/vfio/vfio", ContainerPath: "/dev/vfio/vfio", Permissions: "rw"},
		{HostPath: "/dev/vfio/42", ContainerPath: "/dev/vfio/42", Permissions: "rw"},
	}
	if !reflect.DeepEqual(vfio.DevNodes, wantNodes) {
		t.Errorf("vfio nodes %+v", vfio.DevNodes)
	}
}

func TestRemovedDeviceTurnsUnhealthyAndRecovers(t *testing.T) {
	root := fakeNIC(t)
	p := mustNew(t, root, Selectors{Drivers: []string{"iavf"}})
	if devs, _ := p.Scan(); len(devs) != 1 || !devs[0].Healthy {
		t.Fatalf("before: %+v", devs)
	}
	sysfstest.RemovePCI(t, root, "0000:01:01.0")
	devs, err := p.Scan()
	if err != nil || len(devs) != 1 || devs[0].Healthy || !devs[0].Gone || devs[0].Reason != "PCI function gone from sysfs" {
		t.Fatalf("after removal: %+v %v", devs, err)
	}
	sysfstest.AddPCI(t, root, sysfstest.E810VF("0000:01:01.0", "0000:01:00.0", 0))
	if devs, _ := p.Scan(); len(devs) != 1 || !devs[0].Healthy || devs[0].Gone {
		t.Fatalf("after return: %+v", devs)
	}
}

// A gone device that netdev-dp forgets (no pod holds it) is no longer listed, and is
// listed again, healthy, when it returns; Forget of a device back since is a no-op.
func TestForgottenGoneDeviceIsNotListed(t *testing.T) {
	root := fakeNIC(t)
	p := mustNew(t, root, Selectors{Drivers: []string{"iavf"}})
	const vf = "0000:01:01.0"
	p.Scan()
	sysfstest.RemovePCI(t, root, vf)
	if devs, _ := p.Scan(); len(devs) != 1 || !devs[0].Gone {
		t.Fatalf("after removal: %+v", devs)
	}
	p.Forget([]string{vf})
	if devs, err := p.Scan(); err != nil || len(devs) != 0 {
		t.Fatalf("after Forget: %+v %v", devs, err)
	}
	sysfstest.AddPCI(t, root, sysfstest.E810VF(vf, "0000:01:00.0", 0))
	p.Forget([]string{vf})
	if devs, _ := p.Scan(); len(devs) != 1 || !devs[0].Healthy || devs[0].Gone {
		t.Fatalf("after return: %+v", devs)
	}
}

func TestMissingSysfs(t *testing.T) {
	if _, err := mustNew(t, t.TempDir(), Selectors{}).Scan(); err == nil {
		t.Fatal("scan of a tree without bus/pci/devices succeeded")
	}
}

func mustNew(t *testing.T, root string, sel Selectors) *Source {
	t.Helper()
	p, err := New(root, sel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSelectorsRejectIDsThatNeverMatch: "0x8086" or "8086 " would leave the
// source silently empty; the config error says what form is expected.
func TestSelectorsRejectIDsThatNeverMatch(t *testing.T) {
	for _, sel := range []Selectors{
		{Vendors: []string{"0x8086"}},
		{Devices: []string{"154C"}},
		{Devices: []string{"154"}},
		{Drivers: []string{""}},
	} {
		_, err := New("", sel)
		if err == nil || !strings.Contains(err.Error(), "pci source") {
			t.Errorf("New(%+v): %v, want a pci source config error", sel, err)
		}
	}
	if _, err := New("", Selectors{Vendors: []string{"8086"}, Devices: []string{"154c"}}); err != nil {
		t.Errorf("valid selectors refused: %v", err)
	}
}

// TestPFLinkDownMakesItsVFsUnhealthy: while the PF's link is down its VFs
// are Unhealthy (with the reason), the PF and other NICs' devices are not.
func TestPFLinkDownMakesItsVFsUnhealthy(t *testing.T) {
	root := fakeNIC(t)
	p := mustNew(t, root, Selectors{Vendors: []string{"8086", "15b3"}})
	healthOf := func(devs []source.Device) map[string]string {
		out := map[string]string{}
		for _, d := range devs {
			out[d.ID] = "healthy"
			if !d.Healthy {
				out[d.ID] = d.Reason
			}
		}
		return out
	}
	all := func(vf string) map[string]string {
		return map[string]string{"0000:01:01.0": vf, "0000:01:01.1": vf, "0000:02:00.0": "healthy"}
	}
	sysfstest.SetOperState(t, root, "0000:01:00.0", "ens1f0", "up")
	sysfstest.SetOperState(t, root, "0000:02:00.0", "ens2", "down") // a PF device: its own link does not count
	if devs, err := p.Scan(); err != nil || !reflect.DeepEqual(healthOf(devs), all("healthy")) {
		t.Fatalf("link up: %v %v", healthOf(devs), err)
	}
	sysfstest.SetOperState(t, root, "0000:01:00.0", "ens1f0", "down")
	if devs, err := p.Scan(); err != nil || !reflect.DeepEqual(healthOf(devs), all("PF ens1f0 link down")) {
		t.Fatalf("link down: %v %v", healthOf(devs), err)
	}
	sysfstest.SetOperState(t, root, "0000:01:00.0", "ens1f0", "up")
	if devs, err := p.Scan(); err != nil || !reflect.DeepEqual(healthOf(devs), all("healthy")) {
		t.Fatalf("link up again: %v %v", healthOf(devs), err)
	}
}
