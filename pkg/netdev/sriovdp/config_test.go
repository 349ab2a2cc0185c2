package sriovdp

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

func example(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+"-v3.11.0.json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// manyNICs is a node with several NIC models, for the README's example: an
// X710 PF enp0s0f0 with VFs 154c (iavf, vfio-pci, iavf), an E810 PF
// enp2s2f1 with VFs 1889 (vfio-pci, iavf), a ConnectX-6 IB VF (link type
// infiniband, RDMA mlx5_5), a ConnectX-6 Dx VF with a vhost vDPA device, an
// Intel FPGA (an accelerator), a Broadcom PF without VFs and a BlueField-2
// PF p0 (15b3:a2d6) with SFs of sfnums 0, 1, 5, 6 (mlx5_core.sf.2-5) and
// its driver's own mlx5_core.eth.0; vhost-net and tun exist.
func manyNICs(t *testing.T) string {
	root := t.TempDir()
	add := func(d sysfstest.PCI) { sysfstest.AddPCI(t, root, d) }
	add(sysfstest.PCI{Addr: "0000:18:00.0", Vendor: "8086", Device: "1572", Class: "020000", Driver: "i40e", NumVFs: 3, Net: []string{"enp0s0f0"}})
	add(sysfstest.PCI{Addr: "0000:18:02.0", Vendor: "8086", Device: "154c", Class: "020000", Driver: "iavf", PF: "0000:18:00.0", Net: []string{"enp0s0f0v0"}})
	add(sysfstest.PCI{Addr: "0000:18:02.1", Vendor: "8086", Device: "154c", Class: "020000", Driver: "vfio-pci", PF: "0000:18:00.0", IOMMUGroup: "30"})
	add(sysfstest.PCI{Addr: "0000:18:02.2", Vendor: "8086", Device: "154c", Class: "020000", Driver: "iavf", PF: "0000:18:00.0"})
	add(sysfstest.E810PF("0000:19:00.0", 1, 2, "enp2s2f1"))
	add(sysfstest.PCI{Addr: "0000:19:01.0", Vendor: "8086", Device: "1889", Class: "020000", Driver: "vfio-pci", PF: "0000:19:00.0", NUMA: 1, IOMMUGroup: "31"})
	add(sysfstest.E810VF("0000:19:01.1", "0000:19:00.0", 1))
	add(sysfstest.PCI{Addr: "0000:3b:00.0", Vendor: "15b3", Device: "101b", Class: "020700", Driver: "mlx5_core", NumVFs: 1, Net: []string{"ib0"}})
	add(sysfstest.PCI{Addr: "0000:3b:00.2", Vendor: "15b3", Device: "101c", Class: "020700", Driver: "mlx5_core", PF: "0000:3b:00.0", Net: []string{"ib1"}, RDMA: []string{"mlx5_5"}})
	sysfstest.SetLinkType(t, root, "0000:3b:00.0", "ib0", 32)
	sysfstest.SetLinkType(t, root, "0000:3b:00.2", "ib1", 32)
	sysfstest.AddRDMAChar(t, root, "mlx5_5", 5)
	add(sysfstest.PCI{Addr: "0000:65:00.0", Vendor: "15b3", Device: "101d", Class: "020000", Driver: "mlx5_core", NumVFs: 1, Net: []string{"ens65f0"}})
	add(sysfstest.PCI{Addr: "0000:65:00.2", Vendor: "15b3", Device: "101e", Class: "020000", Driver: "mlx5_core", PF: "0000:65:00.0"})
	sysfstest.AddVDPA(t, root, "vdpa0", "0000:65:00.2", "vhost_vdpa", 0)
	add(sysfstest.PCI{Addr: "0000:af:00.0", Vendor: "8086", Device: "0d90", Class: "120000", Driver: "ifpga"})
	add(sysfstest.PCI{Addr: "0000:5e:00.0", Vendor: "14e4", Device: "1750", Class: "020000", Driver: "bnxt_en", Net: []string{"ens5e"}})
	add(sysfstest.PCI{Addr: "0000:03:00.0", Vendor: "15b3", Device: "a2d6", Class: "020000", Driver: "mlx5_core", Net: []string{"p0"}})
	for _, a := range []sysfstest.Aux{
		{Name: "mlx5_core.eth.0", Parent: "0000:03:00.0", SFNum: -1},
		{Name: "mlx5_core.sf.2", Parent: "0000:03:00.0", SFNum: 0},
		{Name: "mlx5_core.sf.3", Parent: "0000:03:00.0", SFNum: 1, Net: []string{"p0sf1"}},
		{Name: "mlx5_core.sf.4", Parent: "0000:03:00.0", SFNum: 5, Net: []string{"p0sf5"}},
		{Name: "mlx5_core.sf.5", Parent: "0000:03:00.0", SFNum: 6},
	} {
		sysfstest.AddAux(t, root, a)
	}
	sysfstest.AddMisc(t, root, "vhost-net", "tun")
	return root
}

// scanAll opens cfg's resources on root and scans each.
func scanAll(t *testing.T, cfg *resources.Config, root string) map[string][]source.Device {
	t.Helper()
	cfg.SysfsRoot, cfg.CDIDir = root, t.TempDir()
	opened, err := resources.Open(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]source.Device{}
	for _, o := range opened {
		devs, err := o.Source.Scan()
		if err != nil {
			t.Fatalf("%s: %v", o.ResourceName, err)
		}
		out[o.ResourceName] = devs
	}
	return out
}

func ids(devs []source.Device) []string {
	out := []string{}
	for _, d := range devs {
		out = append(out, d.ID)
	}
	return out
}

// TestREADMEExample: the README's example config as published is not JSON
// (a comma before "}" in brcm_sriov_bnxt), which the plugin refuses too;
// fixed, each resource gets the devices the plugin gives it: the first
// resource that selects a device has it (intel_sriov_netdevice_additional_env
// and old_selectors_syntax_example repeat intel_sriov_netdevice's selectors
// and get nothing), mlnx_sriov_rdma asks for driver mlx5_ib, which no
// ConnectX VF is bound to, and bf2_sf (auxNetDevice, pfNames p0#1-5) gets
// the SFs of sfnums 1 and 5 by their auxiliary device names.
func TestREADMEExample(t *testing.T) {
	published := example(t, "readme")
	if _, err := Parse([]byte(published), DefaultPrefix); err == nil || !strings.Contains(err.Error(), "invalid character '}'") {
		t.Fatalf("the README's config as published: %v, want a JSON syntax error", err)
	}
	fixed := strings.Replace(published, "}],\n        },", "}]\n        },", 1)
	cfg, err := Parse([]byte(fixed), DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for name, devs := range scanAll(t, cfg, manyNICs(t)) {
		got[name] = ids(devs)
	}
	want := map[string][]string{
		"intel.com/intel_sriov_netdevice":                {"0000:18:02.0", "0000:18:02.2", "0000:19:01.1"},
		"intel.com/intel_sriov_dpdk":                     {"0000:18:02.1", "0000:19:01.0"},
		"mellanox.com/mlnx_sriov_rdma":                   {},
		"intel.com/infiniband_rdma_netdevs":              {"0000:3b:00.2"},
		"intel.com/ct6dx_vdpa_vhost":                     {"0000:65:00.2"},
		"intel.com/intel_fpga":                           {"0000:af:00.0"},
		"nvidia.com/bf2_sf":                              {"mlx5_core.sf.3", "mlx5_core.sf.4"},
		"intel.com/intel_sriov_netdevice_additional_env": {},
		"broadcom.com/brcm_sriov_bnxt":                   {"0000:5e:00.0"},
		"intel.com/old_selectors_syntax_example":         {},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("devices per resource:\n got %v\nwant %v", got, want)
	}
}

// TestDocumentedConfigMaps: the plugin's other documented ConfigMaps. Those
// that are JSON are accepted (the DDP ones refused: netdev-dp cannot
// select by DDP profile); those that are not JSON as published (vdpa's
// stray "{", dpdk virt's trailing commas) are refused with the line, as the
// plugin refuses them.
func TestDocumentedConfigMaps(t *testing.T) {
	for name, want := range map[string]string{
		"deployments-configMap":   "",
		"rdma-configMap":          "",
		"dpdk-configMap":          "",
		"dpdk-configMap-all-nics": "",
		"mlnx-dpdk-configMap":     "",
		"vdpa-configMap":          "at line 3, column 9: invalid character '{' looking for beginning of object key string",
		"dpdk-configMap-virt":     "invalid character '}' looking for beginning of object key string",
		"ddp-e800-configMap":      "resourceList[0] (e800_default): selectors[0]: ddpProfiles: netdev-dp cannot select by DDP profile",
		"ddp-x700-configMap":      "resourceList[0] (x700_gtp): selectors[0]: ddpProfiles",
	} {
		_, err := Parse([]byte(example(t, name)), DefaultPrefix)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: got %v, want %q", name, err, want)
		}
	}
}

// vfNode is a node with the VFs the plugin's example configs name: an X710
// PF enp0s0f0 with VFs 154c (iavf, vfio-pci, iavf), an E810 PF enp2s2f1
// with VFs 1889 (vfio-pci, iavf), a ConnectX-4 VF 1016 and two ConnectX-5
// VFs 1018 (mlx5_core; RDMA mlx5_2 and mlx5_3, the last without RDMA), a
// Broadcom PF without VFs.
func vfNode(t *testing.T) string {
	root := t.TempDir()
	add := func(d sysfstest.PCI) { sysfstest.AddPCI(t, root, d) }
	add(sysfstest.PCI{Addr: "0000:18:00.0", Vendor: "8086", Device: "1572", Class: "020000", Driver: "i40e", NumVFs: 3, Net: []string{"enp0s0f0"}})
	add(sysfstest.PCI{Addr: "0000:18:02.0", Vendor: "8086", Device: "154c", Class: "020000", Driver: "iavf", PF: "0000:18:00.0"})
	add(sysfstest.PCI{Addr: "0000:18:02.1", Vendor: "8086", Device: "154c", Class: "020000", Driver: "vfio-pci", PF: "0000:18:00.0", IOMMUGroup: "30"})
	add(sysfstest.PCI{Addr: "0000:18:02.2", Vendor: "8086", Device: "154c", Class: "020000", Driver: "iavf", PF: "0000:18:00.0"})
	add(sysfstest.E810PF("0000:19:00.0", 1, 2, "enp2s2f1"))
	add(sysfstest.PCI{Addr: "0000:19:01.0", Vendor: "8086", Device: "1889", Class: "020000", Driver: "vfio-pci", PF: "0000:19:00.0", NUMA: 1, IOMMUGroup: "31"})
	add(sysfstest.E810VF("0000:19:01.1", "0000:19:00.0", 1))
	add(sysfstest.PCI{Addr: "0000:3b:00.0", Vendor: "15b3", Device: "1015", Class: "020000", Driver: "mlx5_core", NumVFs: 1, Net: []string{"ens3b"}})
	add(sysfstest.PCI{Addr: "0000:3b:00.2", Vendor: "15b3", Device: "1016", Class: "020000", Driver: "mlx5_core", PF: "0000:3b:00.0", RDMA: []string{"mlx5_2"}})
	add(sysfstest.PCI{Addr: "0000:5b:00.0", Vendor: "15b3", Device: "1017", Class: "020000", Driver: "mlx5_core", NumVFs: 2, Net: []string{"ens5b"}})
	add(sysfstest.PCI{Addr: "0000:5b:00.2", Vendor: "15b3", Device: "1018", Class: "020000", Driver: "mlx5_core", PF: "0000:5b:00.0", RDMA: []string{"mlx5_3"}})
	add(sysfstest.PCI{Addr: "0000:5b:00.3", Vendor: "15b3", Device: "1018", Class: "020000", Driver: "mlx5_core", PF: "0000:5b:00.0"})
	add(sysfstest.PCI{Addr: "0000:5e:00.0", Vendor: "14e4", Device: "1750", Class: "020000", Driver: "bnxt_en", Net: []string{"ens5e"}})
	sysfstest.AddRDMAChar(t, root, "mlx5_2", 2)
	sysfstest.AddRDMAChar(t, root, "mlx5_3", 3)
	return root
}

// TestDocumentedConfigMapsSelect: the plugin's deployment and DPDK
// ConfigMaps on Intel and Mellanox VFs select what the plugin documents,
// and each device gets what its selector asks (vfio nodes, RDMA nodes).
// Where the example itself selects nothing, the test says why.
func TestDocumentedConfigMapsSelect(t *testing.T) {
	root := vfNode(t)
	for name, want := range map[string]map[string][]string{
		"deployments-configMap": {
			"intel.com/intel_sriov_netdevice": {"0000:18:02.0", "0000:18:02.2", "0000:19:01.1"},
			"intel.com/intel_sriov_dpdk":      {"0000:18:02.1", "0000:19:01.0"},
			// drivers ["mlx5_ib"]: mlx5 VFs are bound to mlx5_core (mlx5_ib
			// is the RDMA part of it, not a PCI driver): nothing, as with the plugin.
			"intel.com/mlnx_sriov_rdma": {},
			"intel.com/brcm_sriov_bnxt": {"0000:5e:00.0"},
		},
		"mlnx-dpdk-configMap": {
			"mellanox.com/mlnx_connectx4": {"0000:3b:00.2"},
			"mellanox.com/mlnx_connectx5": {"0000:5b:00.2"}, // 5b:00.3 has no RDMA device
		},
		"dpdk-configMap-all-nics": {"dpdk.org/nic": {"0000:18:02.1", "0000:3b:00.2", "0000:5b:00.2"}},
		"dpdk-configMap":          {"intel.com/intel_x710vfio": {"0000:18:02.1"}},
	} {
		cfg, err := Parse([]byte(example(t, name)), DefaultPrefix)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		all := scanAll(t, cfg, root)
		got := map[string][]string{}
		for res, devs := range all {
			got[res] = ids(devs)
			for _, d := range devs {
				checkNodes(t, name, d)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: devices per resource:\n got %v\nwant %v", name, got, want)
		}
	}
}

// checkNodes: a vfio-pci VF has /dev/vfio/vfio and its group's node; an
// mlx5 VF (every example selecting one asks isRdma) its RDMA device's
// uverbs; an iavf or bnxt_en function none.
func checkNodes(t *testing.T, config string, d source.Device) {
	t.Helper()
	want := map[string][]string{
		"0000:18:02.1": {"/dev/vfio/vfio", "/dev/vfio/30"}, "0000:19:01.0": {"/dev/vfio/vfio", "/dev/vfio/31"},
		"0000:3b:00.2": {"/dev/infiniband/uverbs2"}, "0000:5b:00.2": {"/dev/infiniband/uverbs3"},
	}[d.ID]
	for _, n := range want {
		if !slicesHasNode(d.DevNodes, n) {
			t.Errorf("%s: %s has nodes %v, want %s among them", config, d.ID, d.DevNodes, n)
		}
	}
	if want == nil && len(d.DevNodes) != 0 {
		t.Errorf("%s: %s has nodes %v, want none", config, d.ID, d.DevNodes)
	}
}

// TestRDMAConfigMap: docs/rdma's config on a ConnectX-5 VF and an E810 VF
// with RDMA and one without: the RDMA ones, with their /dev/infiniband
// nodes; the resource names take the resourcePrefix, else the default.
func TestRDMAConfigMap(t *testing.T) {
	root := t.TempDir()
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:3b:00.0", Vendor: "15b3", Device: "1017", Class: "020000", Driver: "mlx5_core", NumVFs: 1, Net: []string{"ens3b"}})
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:3b:00.2", Vendor: "15b3", Device: "1018", Class: "020000", Driver: "mlx5_core", PF: "0000:3b:00.0", RDMA: []string{"mlx5_2"}})
	sysfstest.AddRDMAChar(t, root, "mlx5_2", 2)
	sysfstest.AddPCI(t, root, sysfstest.E810PF("0000:19:00.0", 0, 2, "ens19"))
	irdma := sysfstest.E810VF("0000:19:01.0", "0000:19:00.0", 0)
	irdma.RDMA = []string{"irdma3"}
	sysfstest.AddPCI(t, root, irdma)
	sysfstest.AddPCI(t, root, sysfstest.E810VF("0000:19:01.1", "0000:19:00.0", 0))
	sysfstest.AddRDMAChar(t, root, "irdma3", 3)
	cfg, err := Parse([]byte(example(t, "rdma-configMap")), "example.org")
	if err != nil {
		t.Fatal(err)
	}
	got := scanAll(t, cfg, root)
	mlx, intel := got["mellanox.com/mlnx_rdma"], got["example.org/intel_rdma"]
	if !reflect.DeepEqual(ids(mlx), []string{"0000:3b:00.2"}) || !reflect.DeepEqual(ids(intel), []string{"0000:19:01.0"}) {
		t.Fatalf("got %v", got)
	}
	if n := mlx[0].DevNodes; len(n) != 4 || n[2].HostPath != "/dev/infiniband/uverbs2" || mlx[0].Info.Pci.RdmaDevice != "mlx5_2" {
		t.Errorf("mlx5 VF %+v", mlx[0])
	}
}

// TestSelectorOrder is the README's selector-order example: in
// [{8086, 154c}, {8086, needVhostNet}] the 154c VFs get no vhost-net, the
// other Intel VFs do; the other order gives every VF vhost-net.
func TestSelectorOrder(t *testing.T) {
	root := manyNICs(t)
	conf := func(sel string) string {
		return `{"resourceList": [{"resourceName": "intel", "selectors": ` + sel + `}]}`
	}
	vhost := map[string]bool{}
	cfg, err := Parse([]byte(conf(`[{"vendors": ["8086"],"devices": ["154c"]}, {"vendors": ["8086"], "needVhostNet": true}]`)), DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range scanAll(t, cfg, root)["intel.com/intel"] {
		vhost[d.ID] = slicesHasNode(d.DevNodes, "/dev/vhost-net")
	}
	want := map[string]bool{"0000:18:02.0": false, "0000:18:02.1": false, "0000:18:02.2": false, "0000:19:01.0": true, "0000:19:01.1": true}
	if !reflect.DeepEqual(vhost, want) {
		t.Errorf("vhost-net per VF %v, want %v", vhost, want)
	}
	cfg, _ = Parse([]byte(conf(`[{"vendors": ["8086"], "needVhostNet": true}, {"vendors": ["8086"],"devices": ["154c"]}]`)), DefaultPrefix)
	for _, d := range scanAll(t, cfg, root)["intel.com/intel"] {
		if !slicesHasNode(d.DevNodes, "/dev/vhost-net") {
			t.Errorf("%s: no vhost-net with the vhost selector first", d.ID)
		}
	}
}

func slicesHasNode(nodes []source.DevNode, path string) bool {
	for _, n := range nodes {
		if n.HostPath == path {
			return true
		}
	}
	return false
}

// TestExcludeTopology: the devices report no NUMA node.
func TestExcludeTopology(t *testing.T) {
	cfg, err := Parse([]byte(`{"resourceList": [{"resourceName": "e810", "excludeTopology": true, "selectors": {"devices": ["1889"]}},
		{"resourceName": "x710", "selectors": {"devices": ["1572", "154c"]}}]}`), DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	got := scanAll(t, cfg, manyNICs(t))
	if d := got["intel.com/e810"]; len(d) != 2 || d[0].NUMANode != -1 || d[1].NUMANode != -1 {
		t.Errorf("excludeTopology: %+v", d)
	}
	if d := got["intel.com/x710"]; len(d) != 3 || d[0].NUMANode != 0 {
		t.Errorf("with topology: %+v", d)
	}
}

// TestConfigErrors: everything the plugin would take silently or ignore
// and netdev-dp cannot honour is refused at start, naming the resource.
func TestConfigErrors(t *testing.T) {
	res := func(body string) string { return `{"resourceList": [` + body + `]}` }
	cases := map[string]string{
		`{"resourceList": []}`:                                                                        "at least one resource",
		`{"resourceList": [], "extra": 1}`:                                                            `unknown field "extra"`,
		res(`{"resourceName": "a", "selectors": {}, "x": 1}`):                                         `unknown field "x"`,
		res(`{"resourceName": "a", "selectors": {"vendor": ["8086"]}}`):                               `resourceList[0] (a): selectors: json: unknown field "vendor"`,
		res(`{"resourceName": "a b", "selectors": {}}`):                                               `resourceName "a b": want letters, digits, _ and - only`,
		res(`{"resourceName": "a"}`):                                                                  "resourceList[0] (a): selectors: required",
		res(`{"resourceName": "a", "selectors": []}`):                                                 "selectors: the list is empty",
		res(`{"resourceName": "a", "selectors": {}}, {"resourceName": "a", "selectors": {}}`):         `resource "intel.com/a" is configured twice`,
		res(`{"resourceName": "a", "deviceType": "gpu", "selectors": {}}`):                            `deviceType "gpu": want netDevice, accelerator or auxNetDevice`,
		res(`{"resourceName": "ib", "selectors": [{}, {"pKeys": ["0x1"]}]}`):                          "resourceList[0] (ib): selectors[1]: pKeys: netdev-dp cannot select by InfiniBand partition key",
		res(`{"resourceName": "q", "deviceType": "accelerator", "selectors": {"pfNames": ["eth0"]}}`): "resourceList[0] (q): selectors[0]: pfNames: not a selector of deviceType accelerator",
		res(`{"resourceName": "a", "selectors": {"pfNames": ["eth0#2-1"]}}`):                          `resourceList[0] (a): selectors[0]: pci source: pfNames: "eth0#2-1": VF range "2-1" ends before it starts`,
		res(`{"resourceName": "a", "selectors": {"vendors": ["0x8086"]}}`):                            `vendors: "0x8086" is not a PCI ID`,
		res(`{"resourceName": "a", "selectors": {}, "additionalInfo": {"eth0": {"k": "v"}}}`):         `additionalInfo: key "eth0" is neither "*" nor a PCI address`,
		res(`{"resourceName": "a", "resourcePrefix": "kubernetes.io", "selectors": {}}`):              "reserved",
		// Every selector netdev-dp cannot honour names itself and the resource.
		res(`{"resourceName": "gtp", "selectors": {"vendors": ["8086"], "ddpProfiles": ["GTP"]}}`):                "resourceList[0] (gtp): selectors[0]: ddpProfiles: netdev-dp cannot select by DDP profile",
		res(`{"resourceName": "a", "selectors": {}}, {"resourceName": "ib", "selectors": {"pKeys": ["0x7fff"]}}`): "resourceList[1] (ib): selectors[0]: pKeys",
		// Bad VF ranges, by PF name and by PF address.
		res(`{"resourceName": "a", "selectors": {"pfNames": ["eth0#3-1"]}}`):            `resourceList[0] (a): selectors[0]: pci source: pfNames: "eth0#3-1": VF range "3-1" ends before it starts`,
		res(`{"resourceName": "a", "selectors": {"pfNames": ["eth0#x"]}}`):              `resourceList[0] (a): selectors[0]: pci source: pfNames: "eth0#x": VF range "x" is not an index or first-last`,
		res(`{"resourceName": "a", "selectors": {"pfNames": ["eth0#0,"]}}`):             `pfNames: "eth0#0,": VF range "" is not an index`,
		res(`{"resourceName": "a", "selectors": {"pfNames": ["#0-3"]}}`):                `pfNames: "#0-3": no PF before the VF ranges`,
		res(`{"resourceName": "a", "selectors": {"rootDevices": ["0000:86:00.0#1-"]}}`): `rootDevices: "0000:86:00.0#1-": VF range "1-" is not an index`,
		// deviceType: unknown, or one the selectors do not fit.
		res(`{"resourceName": "a", "deviceType": "netdevice", "selectors": {}}`): `resourceList[0] (a): deviceType "netdevice": want netDevice, accelerator or auxNetDevice`,
		// resourceName: missing or empty, and twice (with the default prefix and an explicit one).
		res(`{"selectors": {}}`):                     `resourceList[0] (): resourceName "": want letters, digits, _ and - only`,
		res(`{"resourceName": "", "selectors": {}}`): `resourceList[0] (): resourceName ""`,
		res(`{"resourceName": "a", "selectors": {}}, {"resourceName": "a", "resourcePrefix": "intel.com", "selectors": {}}`): `resource "intel.com/a" is configured twice`,
		// auxNetDevice: auxTypes required and "sf" only, the selectors of PCI
		// functions refused; auxTypes elsewhere refused.
		res(`{"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": {"vendors": ["15b3"]}}`):                                                          `resourceList[0] (sf): selectors[0]: auxTypes: required for deviceType auxNetDevice`,
		res(`{"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": {"auxTypes": ["eth"]}}`):                                                          `resourceList[0] (sf): selectors[0]: auxTypes: "eth": only "sf"`,
		res(`{"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": [{"auxTypes": ["sf"]}, {"auxTypes": ["sf"], "pciAddresses": ["0000:03:00.0"]}]}`): `resourceList[0] (sf): selectors[1]: pciAddresses: not a selector of deviceType auxNetDevice`,
		res(`{"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": {"auxTypes": ["sf"], "vdpaType": "vhost"}}`):                                      `vdpaType: not a selector of deviceType auxNetDevice`,
		res(`{"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": {"auxTypes": ["sf"], "pfNames": ["p0#x"]}}`):                                      `resourceList[0] (sf): selectors[0]: pci source: pfNames: "p0#x": VF range "x"`,
		res(`{"resourceName": "vf", "selectors": {"auxTypes": ["sf"]}}`):                                                                                         `resourceList[0] (vf): selectors[0]: auxTypes: a selector of deviceType auxNetDevice, not of netDevice`,
		res(`{"resourceName": "q", "deviceType": "accelerator", "selectors": {"auxTypes": ["sf"]}}`):                                                             `auxTypes: a selector of deviceType auxNetDevice, not of accelerator`,
		// Bad JSON: the position of the fault.
		"{\"resourceList\": [\n  {\"resourceName\": \"a\",}\n]}":        "SR-IOV device plugin config at line 2, column 24: invalid character '}'",
		"{\"resourceList\": [\n  {\"resourceName\": 7}]}":               "SR-IOV device plugin config at line 2, column 20: json: cannot unmarshal number",
		`{"resourceList": [{"resourceName": "a", "selectors": {}}]} {}`: "trailing data after the config object",
		// Both formats in one file.
		`{"resources": [{"resourceName": "devplumb.io/x", "pci": {}}], "resourceList": [{"resourceName": "a", "selectors": {}}]}`: `config holds both netdev-dp's "resources" and the SR-IOV device plugin's "resourceList"`,
	}
	for in, want := range cases {
		_, err := Parse([]byte(in), DefaultPrefix)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s:\n got %v\nwant an error containing %q", in, err, want)
		}
	}
}

// TestIsConfig tells the plugin's config from netdev-dp's by shape.
func TestIsConfig(t *testing.T) {
	if !IsConfig([]byte(example(t, "deployments-configMap"))) || IsConfig([]byte(`{"resources": []}`)) || IsConfig([]byte(`not json`)) {
		t.Error("IsConfig")
	}
}
