package dpmode

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
	"github.com/devplumb/devplumb/pkg/netdev/sriovdp"
)

// TestSRIOVDPAuxNetDevice: the README's bf2_sf resource (deviceType
// auxNetDevice) served as the SR-IOV device plugin serves it: the SFs of
// sfnums 1-5 on PF p0 by their auxiliary device names, with the PF's NUMA
// node; Allocate gives PCIDEVICE_NVIDIA_COM_BF2_SF with the SF names and
// _INFO with the plugin's entries (rdma with the SF's RDMA device, extra
// from additionalInfo keyed by the parent PF), the SF's RDMA nodes; no
// device-info file is written for an SF.
func TestSRIOVDPAuxNetDevice(t *testing.T) {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:03:00.0", Vendor: "15b3", Device: "a2d6", Class: "020000", Driver: "mlx5_core", NUMA: 1, Net: []string{"p0"}})
	for _, a := range []sysfstest.Aux{
		{Name: "mlx5_core.sf.2", Parent: "0000:03:00.0", SFNum: 0},
		{Name: "mlx5_core.sf.3", Parent: "0000:03:00.0", SFNum: 1, Net: []string{"p0sf1"}, RDMA: []string{"mlx5_3"}},
		{Name: "mlx5_core.sf.4", Parent: "0000:03:00.0", SFNum: 5, Net: []string{"p0sf5"}, RDMA: []string{"mlx5_4"}},
	} {
		sysfstest.AddAux(t, root, a)
	}
	sysfstest.AddRDMAChar(t, root, "mlx5_3", 3)
	sysfstest.AddRDMAChar(t, root, "mlx5_4", 4)
	cfg, err := sriovdp.Parse([]byte(`{"resourceList": [{"resourceName": "bf2_sf", "resourcePrefix": "nvidia.com", "deviceType": "auxNetDevice",
		"selectors": [{"vendors": ["15b3"], "devices": ["a2d6"], "pfNames": ["p0#1-5"], "auxTypes": ["sf"], "isRdma": true}],
		"additionalInfo": {"0000:03:00.0": {"port": "p0"}}}]}`), sriovdp.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SysfsRoot, cfg.DevInfoDir, cfg.CDIDir = root, filepath.Join(t.TempDir(), "devinfo"), filepath.Join(t.TempDir(), "cdi")
	const res = "nvidia.com/bf2_sf"
	node, wctx := runRegistered(t, cfg, res)
	var listed []string
	for _, d := range node.Resources()[res] {
		listed = append(listed, d.ID)
		if !slices.Equal(d.NUMANodes, []int64{1}) {
			t.Errorf("%s NUMA %v, want the PF's 1", d.ID, d.NUMANodes)
		}
	}
	if slices.Sort(listed); !slices.Equal(listed, []string{"mlx5_core.sf.3", "mlx5_core.sf.4"}) {
		t.Fatalf("advertised %v, want the SFs of sfnums 1 and 5", listed)
	}
	alloc, err := node.AddPod(wctx, kubeletsim.PodSpec{Namespace: "ns", Name: "p", Containers: []kubeletsim.ContainerSpec{{Name: "c",
		Requests: []kubeletsim.ResourceRequest{{Resource: res, Count: 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ra := alloc.Containers[0].Resources[0]
	sf, env := ra.DeviceIDs[0], ra.Response.Envs
	n := sf[len(sf)-1:] // the RDMA device's number is the SF's here
	want := `{"` + sf + `":{"extra":{"port":"p0"},"generic":{"deviceID":"` + sf + `"},"rdma":{"issm":"/dev/infiniband/issm` + n +
		`","rdma_cm":"/dev/infiniband/rdma_cm","rdma_dev":"mlx5_` + n + `","umad":"/dev/infiniband/umad` + n + `","uverbs":"/dev/infiniband/uverbs` + n + `"}}}`
	if env["PCIDEVICE_NVIDIA_COM_BF2_SF"] != sf || !sameJSON(env["PCIDEVICE_NVIDIA_COM_BF2_SF_INFO"], want) {
		t.Errorf("env %v, want %s and _INFO %s", env, sf, want)
	}
	var nodes []string
	for _, d := range ra.Response.Devices {
		nodes = append(nodes, d.HostPath)
	}
	if len(nodes) != 4 || !slices.Contains(nodes, "/dev/infiniband/uverbs"+n) {
		t.Errorf("device nodes %v, want the SF's RDMA nodes", nodes)
	}
	if entries, _ := os.ReadDir(filepath.Join(cfg.DevInfoDir, "dp")); len(entries) != 0 {
		t.Errorf("device-info files for SFs: %v", entries)
	}
}
