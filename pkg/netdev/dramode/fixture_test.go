package dramode

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/netdev/source/socket"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
	"github.com/devplumb/devplumb/pkg/netdev/source/vdpa"
)

const (
	resVF    = "example.com/vf"
	resVeth  = "example.com/veth"
	resVhost = "example.com/vhu"
	resVDPA  = "example.com/vdpa"
	node     = "node-a"
)

// fixture is one node's device sources: a fake sysfs with four VFs of PF ens1f0
// (two per NUMA node, two bound to vfio-pci, the first with netdev
// ens1f0v0) and a vhost-vdpa device, a real veth pair, a vhost-user socket
// dir; and the dirs the driver writes to.
type fixture struct {
	t                              *testing.T
	sysfs, sockDir, vethPrefix     string
	devinfoDir, cdiDir, pluginsDir string
	cfg                            *resources.Config
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
	f.vethPrefix = vethPair(t)
	for _, s := range []string{"vhu0.sock", "vhu1.sock"} {
		f.listen(s)
	}
	f.cfg = &resources.Config{
		DevInfoDir: f.devinfoDir, CDIDir: f.cdiDir, SysfsRoot: f.sysfs,
		Resync: metav1.Duration{Duration: 100 * time.Millisecond},
		Resources: []resources.Resource{
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

// vethPair creates a veth pair with unique names and removes it at the end.
func vethPair(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	prefix := "drt" + hex.EncodeToString(b)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: prefix + "a"}, PeerName: prefix + "b"}); err != nil {
		t.Fatalf("create veth pair %s: %v", prefix, err)
	}
	t.Cleanup(func() {
		for _, n := range []string{prefix + "a", prefix + "b"} {
			if l, err := netlink.LinkByName(n); err == nil {
				netlink.LinkDel(l)
			}
		}
	})
	return prefix
}

// files lists a directory recursively (files only), relative names.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	return out
}
