package dpmode

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
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
)

// fixture is one node: a kubelet emulator, a fake sysfs with four VFs (two
// per NUMA node, two bound to vfio-pci) and a vhost-vdpa device, a real veth
// pair, a vhost-user socket dir, and the netdev-dp config for all of them.
type fixture struct {
	t          *testing.T
	root       string // kubelet root
	node       *kubeletsim.Node
	sysfs      string
	vethPrefix string
	sockDir    string
	devinfoDir string
	cdiDir     string
	cfg        *Config
	configPath string
	witnesses  int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, root: t.TempDir(), sysfs: t.TempDir(), sockDir: t.TempDir()}
	f.devinfoDir = filepath.Join(t.TempDir(), "devinfo")
	f.cdiDir = filepath.Join(t.TempDir(), "cdi")
	f.startNode()
	f.fakeSysfs()
	f.vethPrefix = testenv.VethPair(t, "dpt")
	for _, s := range []string{"vhu0.sock", "vhu1.sock"} {
		f.listen(s)
	}
	f.cfg = &Config{
		PluginDir:  f.node.PluginDir(),
		DevInfoDir: f.devinfoDir,
		CDIDir:     f.cdiDir,
		SysfsRoot:  f.sysfs,
		Resync:     metav1.Duration{Duration: 100 * time.Millisecond},
		Resources: []Resource{
			{ResourceName: resVF, PCI: &pcipoolSelectors{PFNames: []string{"ens1f0"}}},
			{ResourceName: resVeth, NetDevs: &netdevConfig{Names: []string{f.vethPrefix + "*"}}},
			{ResourceName: resVhost, VhostUser: &vhostConfig{SocketDir: f.sockDir, Mode: "client"}},
			{ResourceName: resVDPA, VDPA: &vdpaSelectors{Drivers: []string{"vhost"}}},
		},
	}
	data, err := json.Marshal(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.configPath = filepath.Join(t.TempDir(), "netdev-dp.json")
	if err := os.WriteFile(f.configPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) startNode() {
	f.t.Helper()
	node, err := kubeletsim.Start(context.Background(), f.root, slog.Default())
	if err != nil {
		f.t.Fatal(err)
	}
	f.node = node
	f.t.Cleanup(func() { f.node.Stop() })
}

func (f *fixture) fakeSysfs() {
	t := f.t
	sysfstest.AddPCI(t, f.sysfs, sysfstest.PCI{Addr: "0000:01:00.0", Vendor: "8086", Device: "1592", Class: "020000", Driver: "ice", NUMA: 0, NumVFs: 4, Net: []string{"ens1f0"}})
	for i, numa := range []int{1, 1, 0, 0} {
		vf := sysfstest.PCI{Addr: fmt.Sprintf("0000:01:01.%d", i), Vendor: "8086", Device: "1889", Class: "020000", Driver: "iavf", NUMA: numa, PF: "0000:01:00.0"}
		if i >= 2 {
			vf.Driver, vf.IOMMUGroup = "vfio-pci", fmt.Sprint(40+i)
		}
		sysfstest.AddPCI(t, f.sysfs, vf)
	}
	// A vDPA-capable NIC elsewhere (not a network PF for the VF pool: no netdev named ens1f0).
	sysfstest.AddPCI(t, f.sysfs, sysfstest.PCI{Addr: "0000:65:00.2", Vendor: "15b3", Device: "101e", Class: "020000", Driver: "mlx5_core", NUMA: 1})
	sysfstest.AddVDPA(t, f.sysfs, "vdpa0", "0000:65:00.2", "vhost_vdpa", 3)
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

// run starts the daemon in-process; the returned stop cancels it and
// returns Run's error.
func (f *fixture) run() (stop func() error) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, f.cfg, slog.Default()) }()
	var result error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-done
		}
		return result
	}
	f.t.Cleanup(func() { stop() })
	f.waitRegistered(resVF, resVeth, resVhost, resVDPA)
	return stop
}

func (f *fixture) waitRegistered(resources ...string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, r := range resources {
		if err := f.node.WaitRegistered(ctx, r); err != nil {
			f.t.Fatal(err)
		}
	}
}

// waitNode waits for the kubelet's view to satisfy cond.
func (f *fixture) waitNode(what string, cond func(map[string][]kubeletsim.Device) bool) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.node.WaitResources(ctx, cond); err != nil {
		f.t.Fatalf("%s: %v; node has %+v", what, err, f.node.Resources())
	}
}

type (
	pcipoolSelectors = pci.Selectors
	netdevConfig     = link.Config
	vhostConfig      = socket.VhostUser
	vdpaSelectors    = vdpa.Selectors
)
