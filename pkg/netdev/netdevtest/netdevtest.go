// Package netdevtest is the node both netdev-dp modes (pkg/netdev/dpmode,
// pkg/netdev/dramode) are tested on: a fake sysfs (sysfstest.AddNode), a
// directory of vhost-user sockets, a veth pair the test made, and the
// netdev-dp config with one resource of each kind of device source.
package netdevtest

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/netdev/source/socket"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
	"github.com/devplumb/devplumb/pkg/netdev/source/vdpa"
	"github.com/devplumb/devplumb/pkg/netdev/sriovdp"
)

// The node's resources.
const (
	ResVF    = "example.com/vf"   // the PF's VFs (pci source)
	ResVeth  = "example.com/veth" // the veth pair (link source)
	ResVhost = "example.com/vhu"  // vhu0.sock, vhu1.sock (socket source, client mode)
	ResVDPA  = "example.com/vdpa" // vdpa0 (vdpa source)
)

// Node is one node's devices and the dirs netdev-dp writes to.
type Node struct {
	t                  testing.TB
	Sysfs, SockDir     string
	VethPrefix         string // the pair is <prefix>a, <prefix>b
	DevInfoDir, CDIDir string // not created: netdev-dp makes them
	Config             *resources.Config
}

// New builds the node in temp dirs around the veth pair named vethPrefix+"a"
// and "b", which the caller made. The config's PluginDir is left empty.
func New(t testing.TB, vethPrefix string) *Node {
	t.Helper()
	n := &Node{t: t, Sysfs: t.TempDir(), SockDir: t.TempDir(), VethPrefix: vethPrefix}
	n.DevInfoDir = filepath.Join(t.TempDir(), "devinfo")
	n.CDIDir = filepath.Join(t.TempDir(), "cdi")
	sysfstest.AddNode(t, n.Sysfs)
	for _, s := range []string{"vhu0.sock", "vhu1.sock"} {
		n.Listen(s)
	}
	n.Config = &resources.Config{
		DevInfoDir: n.DevInfoDir, CDIDir: n.CDIDir, SysfsRoot: n.Sysfs,
		Resync: metav1.Duration{Duration: 100 * time.Millisecond},
		Resources: []resources.Resource{
			{ResourceName: ResVF, PCI: &pci.Selectors{PFNames: []string{sysfstest.NodePFName}}},
			{ResourceName: ResVeth, NetDevs: &link.Config{Names: []string{vethPrefix + "*"}}},
			{ResourceName: ResVhost, VhostUser: &socket.VhostUser{SocketDir: n.SockDir, Mode: "client"}},
			{ResourceName: ResVDPA, VDPA: &vdpa.Selectors{Drivers: []string{"vhost"}}},
		},
	}
	return n
}

// Listen makes socket name in SockDir, open until the test ends.
func (n *Node) Listen(name string) net.Listener {
	n.t.Helper()
	l, err := net.Listen("unix", filepath.Join(n.SockDir, name))
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { l.Close() })
	return l
}

// SRIOVConfig is an SR-IOV network device plugin config for the node
// NewSRIOV makes: intel.com/sriov_rdma (the VF with soft-RoCE rxe0 on
// ens1f0v0), intel.com/sriov_net (the other iavf VF, with an additionalInfo
// token), example.org/sriov_dpdk (the vfio-pci VFs, with vhost-net,
// without topology).
const SRIOVConfig = `{"resourceList": [
  {"resourceName": "sriov_rdma", "selectors": [{"pfNames": ["ens1f0"], "isRdma": true}]},
  {"resourceName": "sriov_net", "selectors": {"drivers": ["iavf"]}, "additionalInfo": {"*": {"token": "t0"}}},
  {"resourceName": "sriov_dpdk", "resourcePrefix": "example.org", "excludeTopology": true,
   "selectors": [{"drivers": ["vfio-pci"], "needVhostNet": true}]}
]}`

// NewSRIOV builds AddNode's sysfs in a temp dir with what SRIOVConfig asks
// for besides (soft-RoCE rxe0 on ens1f0v0 with its char devices, vhost-net
// and tun), and returns SRIOVConfig translated (default prefix intel.com)
// for it, with device-info and CDI dirs of its own. The plugin dir is left
// empty.
func NewSRIOV(t testing.TB) *resources.Config {
	t.Helper()
	root := t.TempDir()
	sysfstest.AddNode(t, root)
	sysfstest.AddSoftRoCE(t, root, "rxe0", sysfstest.NodePFName+"v0")
	sysfstest.AddRDMAChar(t, root, "rxe0", 0)
	sysfstest.AddMisc(t, root, "vhost-net", "tun")
	cfg, err := sriovdp.Parse([]byte(SRIOVConfig), sriovdp.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SysfsRoot, cfg.DevInfoDir, cfg.CDIDir = root, filepath.Join(t.TempDir(), "devinfo"), filepath.Join(t.TempDir(), "cdi")
	cfg.Resync = metav1.Duration{Duration: 100 * time.Millisecond}
	return cfg
}
