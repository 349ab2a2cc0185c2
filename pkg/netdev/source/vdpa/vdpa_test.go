package vdpa

import (
	"reflect"
	"testing"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

func fakeVDPA(t *testing.T) string {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:65:00.0", Vendor: "15b3", Device: "101d", Class: "020000", NUMA: 0, NumVFs: 2})
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:65:00.2", Vendor: "15b3", Device: "101e", Class: "020000", NUMA: 0, PF: "0000:65:00.0"})
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:65:00.3", Vendor: "15b3", Device: "101e", Class: "020000", NUMA: 0, PF: "0000:65:00.0"})
	sysfstest.AddVDPA(t, root, "vdpa0", "0000:65:00.2", "vhost_vdpa", 0)
	sysfstest.AddVDPA(t, root, "vdpa1", "0000:65:00.3", "virtio_vdpa", 3)
	return root
}

func TestScan(t *testing.T) {
	p, err := New(fakeVDPA(t), Selectors{Names: []string{"vdpa*"}})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := p.Scan()
	if err != nil || len(devs) != 2 {
		t.Fatalf("%+v %v", devs, err)
	}
	vhost, virtio := devs[0], devs[1]
	want := &devinfo.VdpaDevice{ParentDevice: "vdpa0", Driver: "vhost", Path: "/dev/vhost-vdpa-0", PciAddress: "0000:65:00.2", PfPciAddress: "0000:65:00.0"}
	if !reflect.DeepEqual(vhost.Info.Vdpa, want) || devinfo.Validate(vhost.Info) != nil || vhost.NUMANode != 0 {
		t.Errorf("vhost device %+v info %+v", vhost, vhost.Info.Vdpa)
	}
	if !reflect.DeepEqual(vhost.DevNodes, []source.DevNode{{HostPath: "/dev/vhost-vdpa-0", ContainerPath: "/dev/vhost-vdpa-0", Permissions: "rw"}}) {
		t.Errorf("vhost nodes %+v", vhost.DevNodes)
	}
	if virtio.Info.Vdpa.Path != "/sys/bus/virtio/devices/virtio3" || virtio.DevNodes != nil || devinfo.Validate(virtio.Info) != nil {
		t.Errorf("virtio device %+v info %+v", virtio, virtio.Info.Vdpa)
	}
}

func TestDriverSelectorAndBadConfig(t *testing.T) {
	p, _ := New(fakeVDPA(t), Selectors{Drivers: []string{"virtio"}})
	if devs, _ := p.Scan(); len(devs) != 1 || devs[0].ID != "vdpa1" {
		t.Errorf("virtio only: %+v", devs)
	}
	if _, err := New("", Selectors{Drivers: []string{"vhost_vdpa"}}); err == nil {
		t.Error("kernel driver name accepted as spec driver")
	}
	if _, err := New("", Selectors{Names: []string{"["}}); err == nil {
		t.Error("bad glob accepted")
	}
}

func TestNoVDPABus(t *testing.T) {
	p, _ := New(t.TempDir(), Selectors{})
	if devs, err := p.Scan(); err != nil || len(devs) != 0 {
		t.Fatalf("%v %v", devs, err)
	}
}
