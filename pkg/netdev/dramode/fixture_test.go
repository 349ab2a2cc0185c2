package dramode

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devplumb/devplumb/pkg/netdev/dpmode"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/netdev/source/socket"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
	"github.com/devplumb/devplumb/pkg/netdev/source/vdpa"
	"github.com/devplumb/devplumb/pkg/testenv"
)

const (
	resVF    = "example.com/vf"
	resVeth  = "example.com/veth"
	resVhost = "example.com/vhu"
	resVDPA  = "example.com/vdpa"
	node     = "node-a"
)

// fixture is one node's pools: a fake sysfs with four VFs of PF ens1f0
// (two per NUMA node, two bound to vfio-pci, the first with netdev
// ens1f0v0) and a vhost-vdpa device, a real veth pair, a vhost-user socket
// dir; and the dirs the driver writes to.
type fixture struct {
	t                              *testing.T
	sysfs, sockDir, vethPrefix     string
	devinfoDir, cdiDir, pluginsDir string
	cfg                            *dpmode.Config
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, sysfs: t.TempDir(), sockDir: t.TempDir(), pluginsDir: t.TempDir()}
	f.devinfoDir = filepath.Join(t.TempDir(), "devinfo")
	f.cdiDir = filepath.Join(t.TempDir(), "cdi")
	sysfstest.AddPCI(t, f.sysfs, sysfstest.PCI{Addr: "0000:01:00.0", Vendor: "8086", Device: "1592", Class: "020000", Driver: "ice", NUMA: 0, NumVFs: 4, Net: []string{"ens1f0"}})
	for i, numa := range []int{1, 1, 0, 0} {
		vf := sysfstest.PCI{Addr: fmt.Sprintf("0000:01:01.%d", i), Vendor: "8086", Device: "1889", Class: "020000", Driver: "iavf", NUMA: numa, PF: "0000:01:00.0"}
		if i == 0 {
			vf.Net = []string{"ens1f0v0"}
		}
		if i >= 2 {
			vf.Driver, vf.IOMMUGroup = "vfio-pci", fmt.Sprint(40+i)
		}
		sysfstest.AddPCI(t, f.sysfs, vf)
	}
	sysfstest.AddPCI(t, f.sysfs, sysfstest.PCI{Addr: "0000:65:00.2", Vendor: "15b3", Device: "101e", Class: "020000", Driver: "mlx5_core", NUMA: 1})
	sysfstest.AddVDPA(t, f.sysfs, "vdpa0", "0000:65:00.2", "vhost_vdpa", 3)
	f.vethPrefix = testenv.VethPair(t, "drt")
	for _, s := range []string{"vhu0.sock", "vhu1.sock"} {
		f.listen(s)
	}
	f.cfg = &dpmode.Config{
		DevInfoDir: f.devinfoDir, CDIDir: f.cdiDir, SysfsRoot: f.sysfs,
		Resync: metav1.Duration{Duration: 100 * time.Millisecond},
		Resources: []dpmode.Resource{
			{ResourceName: resVF, PCI: &pci.Selectors{PFNames: []string{"ens1f0"}}},
			{ResourceName: resVeth, NetDevs: &link.Config{Names: []string{f.vethPrefix + "*"}}},
			{ResourceName: resVhost, VhostUser: &socket.VhostUser{SocketDir: f.sockDir, Mode: "client"}},
			{ResourceName: resVDPA, VDPA: &vdpa.Selectors{Drivers: []string{"vhost"}}},
		},
	}
	return f
}

func (f *fixture) listen(name string) net.Listener {
	f.t.Helper()
	l, err := net.Listen("unix", filepath.Join(f.sockDir, name))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { l.Close() })
	return l
}

// driver makes a driver for the fixture (a run of netdev-dp) and scans once.
func (f *fixture) driver() *Driver {
	f.t.Helper()
	d, err := New(f.cfg, Options{NodeName: node, PluginsDir: f.pluginsDir}, slog.Default())
	if err != nil {
		f.t.Fatal(err)
	}
	if err := d.sync(); err != nil {
		f.t.Fatal(err)
	}
	return d
}

// claim is an allocated claim holding the named devices of pool.
func claim(name, pool string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	alloc := &resourceapi.AllocationResult{}
	for i, dev := range devices {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: fmt.Sprintf("req%d", i), Driver: DefaultDriverName, Pool: pool, Device: dev,
		})
	}
	c.Status.Allocation = alloc
	return c
}
