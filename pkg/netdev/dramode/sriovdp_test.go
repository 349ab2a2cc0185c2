package dramode

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/sriovdp"
)

// TestSRIOVDPConfigAsDRADriver: the SR-IOV device plugin's config served
// as a DRA driver: every device published with the resource name and
// device ID Multus and devplumb match on and Kubernetes' standard
// attributes (no NUMA node with excludeTopology); a claim's containers get
// what that plugin's containers get: PCIDEVICE_<PREFIX>_<NAME> and _INFO
// naming the claim's devices of each resource, the device nodes, the
// device-info files.
func TestSRIOVDPConfigAsDRADriver(t *testing.T) {
	cfg := netdevtest.NewSRIOV(t)
	d, err := New(cfg, Options{NodeName: node, PluginsDir: t.TempDir()}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
	rdma, dpdk2, dpdk3 := DeviceName("intel.com/sriov_rdma", "0000:01:01.0"), DeviceName("example.org/sriov_dpdk", "0000:01:01.2"), DeviceName("example.org/sriov_dpdk", "0000:01:01.3")
	got := published(t, d)
	wantRDMA := map[string]string{"k8s.cni.cncf.io/resourceName": "intel.com/sriov_rdma", "k8s.cni.cncf.io/deviceID": "0000:01:01.0",
		"resource.kubernetes.io/pcieRoot": "pci0000:00", "resource.kubernetes.io/pciBusID": "0000:01:01.0", "resource.kubernetes.io/numaNode": "1"}
	for k, v := range wantRDMA {
		if got[rdma][k] != v {
			t.Errorf("%s: attribute %s = %q, want %q (all: %v)", rdma, k, got[rdma][k], v, got[rdma])
		}
	}
	if _, ok := got[dpdk2]["resource.kubernetes.io/numaNode"]; ok || got[dpdk2]["resource.kubernetes.io/pcieRoot"] != "pci0000:00" {
		t.Errorf("excludeTopology device %s: %v", dpdk2, got[dpdk2])
	}

	c := claim("net", node, rdma, dpdk2, dpdk3)
	r := prepare(t, d, c)[c.UID]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	// What the runtime gives the container: the edits of the claim's CDI
	// devices (injecting them would stat the host's device nodes).
	cache := cdiCache(t, cfg.CDIDir)
	var env, nodes []string
	for _, name := range cdiNames(r) {
		dev := cache.GetDevice(name)
		if dev == nil {
			t.Fatalf("CDI device %s not in the specs", name)
		}
		env = append(env, dev.ContainerEdits.Env...)
		for _, n := range dev.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
	}
	checkSRIOVContainer(t, env, nodes)
	info, err := devinfo.NewStore(cfg.DevInfoDir).ReadDP("intel.com/sriov_rdma", "0000:01:01.0")
	if err != nil || info.Pci == nil || info.Pci.RdmaDevice != "rxe0" {
		t.Errorf("device-info %+v: %v", info, err)
	}

	// A difference from the plugin (docs/sriov-dp-migration.md): two claims
	// of one resource each name only their own devices in the variable, so a
	// container holding both sees one claim's in it.
	unprepare(t, d, c)
	c1, c2 := claim("one", node, dpdk2), claim("two", node, dpdk3)
	res := prepare(t, d, c1, c2)
	cache = cdiCache(t, cfg.CDIDir)
	for uid, want := range map[string]string{"uid-one": "0000:01:01.2", "uid-two": "0000:01:01.3"} {
		dev := cache.GetDevice(cdiNames(res[types.UID(uid)])[0])
		if !slices.Contains(dev.ContainerEdits.Env, "PCIDEVICE_EXAMPLE_ORG_SRIOV_DPDK="+want) {
			t.Errorf("claim %s: env %v", uid, dev.ContainerEdits.Env)
		}
	}
}

func checkSRIOVContainer(t *testing.T, envList, nodes []string) {
	t.Helper()
	env := map[string]string{}
	for _, e := range envList {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	if env["PCIDEVICE_INTEL_COM_SRIOV_RDMA"] != "0000:01:01.0" || env["PCIDEVICE_EXAMPLE_ORG_SRIOV_DPDK"] != "0000:01:01.2,0000:01:01.3" {
		t.Errorf("env %v", env)
	}
	for _, k := range []string{"PCIDEVICE_INTEL_COM_SRIOV_RDMA_INFO", "PCIDEVICE_EXAMPLE_ORG_SRIOV_DPDK_INFO"} {
		if !strings.Contains(env[k], `"generic":{"deviceID"`) {
			t.Errorf("%s = %q", k, env[k])
		}
	}
	if !strings.Contains(env["PCIDEVICE_INTEL_COM_SRIOV_RDMA_INFO"], `"rdma_dev":"rxe0"`) || !strings.Contains(env["PCIDEVICE_EXAMPLE_ORG_SRIOV_DPDK_INFO"], `"dev-mount":"/dev/vfio/43"`) {
		t.Errorf("_INFO: %v", env)
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes) // /dev/vfio/vfio, vhost-net and tun are in both VFs' edits
	want := []string{"/dev/infiniband/issm0", "/dev/infiniband/rdma_cm", "/dev/infiniband/umad0", "/dev/infiniband/uverbs0",
		"/dev/net/tun", "/dev/vfio/42", "/dev/vfio/43", "/dev/vfio/vfio", "/dev/vhost-net"}
	if !slices.Equal(nodes, want) {
		t.Errorf("device nodes %v, want %v", nodes, want)
	}
}

// TestDeviceClasses: one class per resource, named after it, selecting the
// driver's devices of that resource, with the resource as its extended
// resource name; names that collide are refused.
func TestDeviceClasses(t *testing.T) {
	classes, err := DeviceClasses(netdevtest.NewSRIOV(t), DefaultDriverName)
	if err != nil || len(classes) != 3 {
		t.Fatalf("%v %v", classes, err)
	}
	c := classes[2]
	if c.Name != "sriov-dpdk.example.org" || *c.Spec.ExtendedResourceName != "example.org/sriov_dpdk" || c.Kind != "DeviceClass" ||
		c.Spec.Selectors[0].CEL.Expression != `device.driver == "netdev.devplumb.io" && device.attributes["k8s.cni.cncf.io"].resourceName == "example.org/sriov_dpdk"` {
		t.Errorf("class %+v", c)
	}
	clash, _ := sriovdp.Parse([]byte(`{"resourceList": [{"resourceName": "a_b", "selectors": {}}, {"resourceName": "a-b", "selectors": {}}]}`), "x.org")
	if _, err := DeviceClasses(clash, DefaultDriverName); err == nil || !strings.Contains(err.Error(), `x.org/a_b and x.org/a-b would both be served by DeviceClass "a-b.x.org"`) {
		t.Errorf("clash: %v", err)
	}
}
