package dramode

import (
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
	"github.com/devplumb/devplumb/pkg/netdev/sriovdp"
)

// TestSRIOVDPAuxNetDeviceAsDRADriver: an auxNetDevice resource (the
// README's bf2_sf) as a DRA driver: each SF published under a DNS-label
// name with its name as k8s.cni.cncf.io/deviceID, the resource name and
// its PF's NUMA node and PCIe root, and no pciBusID (an SF is not a PCI function); a
// claim's container gets PCIDEVICE_NVIDIA_COM_BF2_SF and _INFO naming it,
// and the SF's RDMA nodes.
func TestSRIOVDPAuxNetDeviceAsDRADriver(t *testing.T) {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:03:00.0", Vendor: "15b3", Device: "a2d6", Class: "020000", Driver: "mlx5_core", NUMA: 1, Net: []string{"p0"}})
	sysfstest.AddAux(t, root, sysfstest.Aux{Name: "mlx5_core.sf.3", Parent: "0000:03:00.0", SFNum: 1, Net: []string{"p0sf1"}, RDMA: []string{"mlx5_3"}})
	sysfstest.AddRDMAChar(t, root, "mlx5_3", 3)
	cfg, err := sriovdp.Parse([]byte(`{"resourceList": [{"resourceName": "bf2_sf", "resourcePrefix": "nvidia.com", "deviceType": "auxNetDevice",
		"selectors": [{"pfNames": ["p0#1-5"], "auxTypes": ["sf"], "isRdma": true}]}]}`), sriovdp.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SysfsRoot, cfg.DevInfoDir, cfg.CDIDir = root, filepath.Join(t.TempDir(), "devinfo"), filepath.Join(t.TempDir(), "cdi")
	d, err := New(cfg, Options{NodeName: node, PluginsDir: t.TempDir()}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
	name := DeviceName("nvidia.com/bf2_sf", "mlx5_core.sf.3")
	attrs := published(t, d)[name]
	if attrs["k8s.cni.cncf.io/deviceID"] != "mlx5_core.sf.3" || attrs["k8s.cni.cncf.io/resourceName"] != "nvidia.com/bf2_sf" ||
		attrs["resource.kubernetes.io/numaNode"] != "1" || attrs["resource.kubernetes.io/pciBusID"] != "" ||
		attrs["resource.kubernetes.io/pcieRoot"] != "pci0000:00" {
		t.Errorf("SF %s attributes %v", name, attrs)
	}
	c := claim("sf", node, name)
	r := prepare(t, d, c)[c.UID]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	dev := cdiCache(t, cfg.CDIDir).GetDevice(cdiNames(r)[0])
	if dev == nil {
		t.Fatalf("CDI device %v not in the specs", cdiNames(r))
	}
	env := strings.Join(dev.ContainerEdits.Env, "\n")
	if !slices.Contains(dev.ContainerEdits.Env, "PCIDEVICE_NVIDIA_COM_BF2_SF=mlx5_core.sf.3") || !strings.Contains(env, `"rdma_dev":"mlx5_3"`) {
		t.Errorf("env %v", dev.ContainerEdits.Env)
	}
	var nodes []string
	for _, n := range dev.ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	if !slices.Contains(nodes, "/dev/infiniband/uverbs3") {
		t.Errorf("device nodes %v", nodes)
	}
}
