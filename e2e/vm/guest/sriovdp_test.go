//go:build vmguest

package guest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
)

// sriovDPConfig is the SR-IOV network device plugin's deployments/configMap.yaml
// config.json at v3.11.0 (pkg/netdev/sriovdp/testdata/deployments-configMap-v3.11.0.json),
// adapted to the guest in two places only: QEMU's igb VFs are 8086:10ca bound to igbvf,
// which the example's Intel resources do not list, so "10ca" joins their devices and
// "igbvf" their drivers; and the DPDK resource's pfNames (enp0s0f0, enp2s2f1 on the
// plugin's example host) become the guest's first PF's name. The Mellanox and Broadcom
// resources stay as published: nothing in the guest matches them.
func sriovDPConfig(pf0 string) string {
	return `{
    "resourceList": [{
            "resourceName": "intel_sriov_netdevice",
            "selectors": {
                "vendors": ["8086"],
                "devices": ["154c", "10ed", "1889", "10ca"],
                "drivers": ["i40evf", "iavf", "ixgbevf", "igbvf"]
            }
        },
        {
            "resourceName": "intel_sriov_dpdk",
            "selectors": {
                "vendors": ["8086"],
                "devices": ["154c", "10ed", "1889", "10ca"],
                "drivers": ["vfio-pci"],
                "pfNames": ["` + pf0 + `"]
            }
        },
        {
            "resourceName": "mlnx_sriov_rdma",
            "selectors": {
                "vendors": ["15b3"],
                "devices": ["1018"],
                "drivers": ["mlx5_ib"],
                "isRdma": true
            }
        },
        {
            "resourceName": "brcm_sriov_bnxt",
            "selectors": {
                "vendors": ["14e4"],
                "devices": ["1750"],
                "drivers": ["bnxt_en"]
            }
        }
    ]
}`
}

const (
	sriovNet  = "intel.com/intel_sriov_netdevice"
	sriovDPDK = "intel.com/intel_sriov_dpdk"
	sriovMlnx = "intel.com/mlnx_sriov_rdma"
	sriovBrcm = "intel.com/brcm_sriov_bnxt"
)

// startSRIOVDPNode is startNode with an SR-IOV device plugin config given as it is
// (--config-file, the plugin's own flag name); it waits until each of names is
// registered.
func startSRIOVDPNode(t *testing.T, config string, names ...string) *node {
	t.Helper()
	n := &node{t: t, bin: bin(t), root: t.TempDir()}
	var err error
	n.sim, err = kubeapi.Spawn(n.root, "nodesim", filepath.Join(n.bin, "nodesim"), "serve", "--root", n.root)
	e2etest.Must(t, err)
	t.Cleanup(func() { n.sim.Terminate(10 * time.Second) })
	eventually(t, 30*time.Second, "nodesim's kubelet.sock", func() bool {
		_, err := os.Stat(filepath.Join(n.root, "device-plugins", "kubelet.sock"))
		return err == nil
	})
	cfg := filepath.Join(n.root, "config.json")
	e2etest.Must(t, os.WriteFile(cfg, []byte(config), 0o644))
	n.dp, err = kubeapi.Spawn(n.root, "netdev-dp", filepath.Join(n.bin, "netdev-dp"), "--config-file", cfg,
		"--plugin-dir", filepath.Join(n.root, "device-plugins"), "--devinfo-dir", n.devinfoDir(),
		"--cdi-dir", filepath.Join(n.root, "cdi"), "--pod-resources-socket", n.podResources())
	e2etest.Must(t, err)
	t.Cleanup(func() { n.dp.Terminate(10 * time.Second) })
	t.Cleanup(n.logsOnFailure)
	n.ctl, err = kubeletsim.NewControlClient(n.root)
	e2etest.Must(t, err)
	for _, name := range names {
		eventually(t, time.Minute, "netdev-dp registering "+name, func() bool {
			if done, err := n.dp.Exited(); done {
				t.Fatalf("netdev-dp exited: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return n.ctl.WaitRegistered(ctx, name) == nil
		})
	}
	return n
}

// The SR-IOV device plugin's documented deployment config, given to netdev-dp as it is,
// on the guest's igb VFs: PF0 has VF0 on vfio-pci and VF1, VF2 on igbvf; PF1 VF0 on
// vfio-pci and VF1 on igbvf. intel_sriov_netdevice gets the four igbvf VFs (both PFs),
// intel_sriov_dpdk PF0's vfio-pci VF only (its pfNames leave PF1's out, so that VF is in
// no resource), each with its PF's NUMA node. A container gets what the plugin gives:
// PCIDEVICE_INTEL_COM_<NAME> with the VFs' addresses and _INFO with the plugin's
// "generic" entry, plus "vfio" (mount, dev-mount) and the device nodes /dev/vfio/vfio and
// the VF's IOMMU group for the vfio-pci VF, none for an igbvf VF; every VF has its
// device-info file (pci, its address and its PF). Where netdev-dp differs from the
// plugin, the test says so: the two resources nothing selects are registered (with no
// devices), where the plugin skips them (docs/sriov-dp-migration.md lists it).
func TestSRIOVDPConfigOnRealVFs(t *testing.T) {
	p := pfs(t)
	vfs0, vfs1 := p[0].setVFs(t, 3), p[1].setVFs(t, 2)
	bindDriver(t, vfs0[0], "vfio-pci")
	bindDriver(t, vfs1[0], "vfio-pci")
	group, err := os.Readlink(filepath.Join(sysfs.DevicesDir(sysfs.DefaultRoot), vfs0[0], "iommu_group"))
	e2etest.Must(t, err)
	groupNode := filepath.Join("/dev/vfio", filepath.Base(group))
	t.Logf("PF %s (%s) VFs %v, PF %s (%s) VFs %v; vfio-pci: %s (group node %s), %s",
		p[0].addr, p[0].netdev, vfs0, p[1].addr, p[1].netdev, vfs1, vfs0[0], groupNode, vfs1[0])

	// Not what the plugin does: it registers no resource without devices.
	n := startSRIOVDPNode(t, sriovDPConfig(p[0].netdev), sriovNet, sriovDPDK, sriovMlnx, sriovBrcm)
	pfOf := map[string]pf{}
	for _, vf := range vfs0 {
		pfOf[vf] = p[0]
	}
	for _, vf := range vfs1 {
		pfOf[vf] = p[1]
	}
	want := map[string][]string{
		sriovNet:  {vfs0[1], vfs0[2], vfs1[1]},
		sriovDPDK: {vfs0[0]},
		sriovMlnx: nil,
		sriovBrcm: nil,
	}
	for res, vfs := range want {
		for _, d := range n.devices(res, allHealthy(vfs)) {
			if numa := int64(pfOf[d.ID].numa); !slices.Equal(d.NUMANodes, []int64{numa}) {
				t.Errorf("%s device %s NUMA nodes %v, want its PF's %d", res, d.ID, d.NUMANodes, numa)
			}
		}
	}
	checkSRIOVDPDeviceInfo(t, n, want, pfOf)

	net := allocateSRIOVDP(t, n, "app", sriovNet, 2)
	checkSRIOVDPEnv(t, "PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE", net, func(string) map[string]map[string]string { return nil })
	if len(net.Response.Devices) != 0 {
		t.Errorf("igbvf VFs came with device nodes %v; the plugin gives none", net.Response.Devices)
	}

	dpdk := allocateSRIOVDP(t, n, "dpdk", sriovDPDK, 1)
	checkSRIOVDPEnv(t, "PCIDEVICE_INTEL_COM_INTEL_SRIOV_DPDK", dpdk, func(string) map[string]map[string]string {
		return map[string]map[string]string{"vfio": {"mount": "/dev/vfio/vfio", "dev-mount": groupNode}}
	})
	var nodes []string
	for _, d := range dpdk.Response.Devices {
		if d.HostPath != d.ContainerPath {
			t.Errorf("device node %s appears in the container as %s", d.HostPath, d.ContainerPath)
		}
		nodes = append(nodes, d.HostPath)
	}
	if slices.Sort(nodes); !slices.Equal(nodes, sorted([]string{"/dev/vfio/vfio", groupNode})) {
		t.Errorf("vfio-pci VF's device nodes %v, want /dev/vfio/vfio and %s", nodes, groupNode)
	}
	if _, err := n.addPod("dpdk2", sriovDPDK, 1); err == nil {
		t.Errorf("a second pod got a VF of %s, which has one", sriovDPDK)
	}
	n.delPod("app")
	n.delPod("dpdk")
}

// allocateSRIOVDP admits pod name asking count devices of res and returns its allocation.
func allocateSRIOVDP(t *testing.T, n *node, pod, res string, count int) kubeletsim.ResourceAllocation {
	t.Helper()
	a, err := n.addPod(pod, res, count)
	e2etest.Must(t, err)
	r := a.Containers[0].Resources[0]
	if len(r.DeviceIDs) != count || r.Response == nil {
		t.Fatalf("pod %s: %+v", pod, r)
	}
	t.Logf("pod %s: %s %v, env %v, device nodes %v", pod, res, r.DeviceIDs, r.Response.Envs, r.Response.Devices)
	return r
}

// checkSRIOVDPEnv: key names the allocated VFs (comma-separated, as allocated) and
// key_INFO maps each to the plugin's "generic" entry and the entries more(id) gives.
func checkSRIOVDPEnv(t *testing.T, key string, r kubeletsim.ResourceAllocation, more func(string) map[string]map[string]string) {
	t.Helper()
	env := r.Response.Envs
	if got := strings.Split(env[key], ","); !slices.Equal(sorted(got), sorted(r.DeviceIDs)) {
		t.Errorf("%s=%q, want the VFs %v", key, env[key], r.DeviceIDs)
	}
	var info map[string]map[string]map[string]string
	if err := json.Unmarshal([]byte(env[key+"_INFO"]), &info); err != nil {
		t.Fatalf("%s_INFO=%q: %v", key, env[key+"_INFO"], err)
	}
	want := map[string]map[string]map[string]string{}
	for _, id := range r.DeviceIDs {
		want[id] = map[string]map[string]string{"generic": {"deviceID": id}}
		for k, v := range more(id) {
			want[id][k] = v
		}
	}
	if gotJSON, wantJSON := mustJSON(t, info), mustJSON(t, want); gotJSON != wantJSON {
		t.Errorf("%s_INFO\n got %s\nwant %s", key, gotJSON, wantJSON)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v) // maps marshal with sorted keys: comparable
	e2etest.Must(t, err)
	return string(b)
}

// checkSRIOVDPDeviceInfo: each advertised VF has its device-info file (the
// Device Information spec's dp/ file, as the plugin writes it): pci with its address
// and its PF's.
func checkSRIOVDPDeviceInfo(t *testing.T, n *node, want map[string][]string, pfOf map[string]pf) {
	t.Helper()
	store := devinfo.NewStore(n.devinfoDir())
	for res, vfs := range want {
		for _, vf := range vfs {
			info, err := store.ReadDP(res, vf)
			if err != nil {
				t.Errorf("%s %s: device-info: %v", res, vf, err)
				continue
			}
			if info.Type != devinfo.TypePCI || info.Pci == nil || info.Pci.PciAddress != vf || info.Pci.PfPciAddress != pfOf[vf].addr {
				t.Errorf("%s %s: device-info %+v, want pci %s of PF %s", res, vf, info, vf, pfOf[vf].addr)
			}
		}
	}
}
