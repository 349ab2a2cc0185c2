package dpmode

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
)

// runRegistered serves cfg to a kubelet emulator of its own until the test
// ends, once each of resources is registered; the context bounds the test's
// calls to the emulator.
func runRegistered(t *testing.T, cfg *resources.Config, names ...string) (*kubeletsim.Node, context.Context) {
	t.Helper()
	node, err := kubeletsim.Start(context.Background(), t.TempDir(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Stop() })
	cfg.PluginDir, cfg.PodResourcesSocket = node.PluginDir(), node.PodResourcesSocket()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, nil, slog.Default()) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(wcancel)
	for _, r := range names {
		if err := node.WaitRegistered(wctx, r); err != nil {
			t.Fatal(err)
		}
	}
	return node, wctx
}

// TestSRIOVDPConfig: the SR-IOV device plugin's config served as that
// plugin serves it: its resource names, the devices each resource gets (a
// device to the first resource), NUMA nodes unless excludeTopology, and an
// Allocate answer with PCIDEVICE_<PREFIX>_<NAME> and _INFO, the RDMA, VFIO
// and vhost-net device nodes, and the device-info files (rdma-device).
func TestSRIOVDPConfig(t *testing.T) {
	cfg := netdevtest.NewSRIOV(t)
	node, wctx := runRegistered(t, cfg, "intel.com/sriov_rdma", "intel.com/sriov_net", "example.org/sriov_dpdk")
	checkSRIOVAdvertised(t, node.Resources())
	checkSRIOVAllocate(t, wctx, node)
	info, err := devinfo.NewStore(cfg.DevInfoDir).ReadDP("intel.com/sriov_rdma", "0000:01:01.0")
	if err != nil || info.Pci == nil || info.Pci.RdmaDevice != "rxe0" || info.Pci.PciAddress != "0000:01:01.0" {
		t.Errorf("RDMA VF device-info %+v: %v", info, err)
	}
}

func checkSRIOVAdvertised(t *testing.T, res map[string][]kubeletsim.Device) {
	t.Helper()
	want := map[string]map[string][]int64{
		"intel.com/sriov_rdma":   {"0000:01:01.0": {1}},
		"intel.com/sriov_net":    {"0000:01:01.1": {1}},
		"example.org/sriov_dpdk": {"0000:01:01.2": nil, "0000:01:01.3": nil},
	}
	for r, w := range want {
		got := map[string][]int64{}
		for _, d := range res[r] {
			got[d.ID] = d.NUMANodes
		}
		if len(got) != len(w) {
			t.Errorf("%s: node has %v, want %v", r, got, w)
		}
		for id, numa := range w {
			if g, ok := got[id]; !ok || !slices.Equal(g, numa) {
				t.Errorf("%s %s: NUMA %v (listed %v), want %v", r, id, g, ok, numa)
			}
		}
	}
}

func checkSRIOVAllocate(t *testing.T, ctx context.Context, node *kubeletsim.Node) {
	t.Helper()
	alloc, err := node.AddPod(ctx, kubeletsim.PodSpec{Namespace: "ns", Name: "p", Containers: []kubeletsim.ContainerSpec{{Name: "c", Requests: []kubeletsim.ResourceRequest{
		{Resource: "intel.com/sriov_rdma", Count: 1}, {Resource: "intel.com/sriov_net", Count: 1}, {Resource: "example.org/sriov_dpdk", Count: 2},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		key   string
		info  string
		nodes []string
	}{
		"intel.com/sriov_rdma": {"PCIDEVICE_INTEL_COM_SRIOV_RDMA",
			`{"0000:01:01.0":{"generic":{"deviceID":"0000:01:01.0"},"rdma":{"issm":"/dev/infiniband/issm0","rdma_cm":"/dev/infiniband/rdma_cm","rdma_dev":"rxe0","umad":"/dev/infiniband/umad0","uverbs":"/dev/infiniband/uverbs0"}}}`,
			[]string{"/dev/infiniband/issm0", "/dev/infiniband/umad0", "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"}},
		"intel.com/sriov_net": {"PCIDEVICE_INTEL_COM_SRIOV_NET",
			`{"0000:01:01.1":{"extra":{"token":"t0"},"generic":{"deviceID":"0000:01:01.1"}}}`, nil},
		"example.org/sriov_dpdk": {"PCIDEVICE_EXAMPLE_ORG_SRIOV_DPDK",
			`{"0000:01:01.2":{"generic":{"deviceID":"0000:01:01.2"},"vfio":{"dev-mount":"/dev/vfio/42","mount":"/dev/vfio/vfio"},"vhost":{"net-mount":"/dev/vhost-net","tun-mount":"/dev/net/tun"}},` +
				`"0000:01:01.3":{"generic":{"deviceID":"0000:01:01.3"},"vfio":{"dev-mount":"/dev/vfio/43","mount":"/dev/vfio/vfio"},"vhost":{"net-mount":"/dev/vhost-net","tun-mount":"/dev/net/tun"}}}`,
			[]string{"/dev/vfio/vfio", "/dev/vfio/42", "/dev/vhost-net", "/dev/net/tun", "/dev/vfio/43"}},
	}
	for _, ra := range alloc.Containers[0].Resources {
		w, env := want[ra.Resource], ra.Response.Envs
		if env[w.key] != strings.Join(ra.DeviceIDs, ",") || !sameJSON(env[w.key+"_INFO"], w.info) {
			t.Errorf("%s: env %v, want %s=%v and _INFO %s", ra.Resource, env, w.key, ra.DeviceIDs, w.info)
		}
		var nodes []string
		for _, d := range ra.Response.Devices {
			nodes = append(nodes, d.HostPath)
		}
		slices.Sort(nodes)
		slices.Sort(w.nodes)
		if !slices.Equal(nodes, w.nodes) {
			t.Errorf("%s: device nodes %v, want %v", ra.Resource, nodes, w.nodes)
		}
	}
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}
