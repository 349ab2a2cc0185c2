package sriovdp

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

func TestEnvKey(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"intel.com", "intel_sriov_netdevice"}: "PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE",
		{"mellanox.com", "mlnx_rdma"}:          "PCIDEVICE_MELLANOX_COM_MLNX_RDMA",
		{"example.org", "sriov-net"}:           "PCIDEVICE_EXAMPLE_ORG_SRIOV-NET", // the plugin keeps "-"
	} {
		if got := EnvKey(in[0], in[1]); got != want {
			t.Errorf("EnvKey(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}

func node(p string) source.DevNode {
	return source.DevNode{HostPath: p, ContainerPath: p, Permissions: "rw"}
}

// TestEnv: the IDs in the order given and the _INFO object with the
// plugin's provider entries for a vfio-pci VF, an RDMA VF with vhost-net,
// a vhost vDPA VF and a virtio one; additionalInfo "*" under a device's own
// entry.
func TestEnv(t *testing.T) {
	pciInfo := func(addr, rdma string) *devinfo.DeviceInfo {
		return &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version, Pci: &devinfo.PciDevice{PciAddress: addr, RdmaDevice: rdma}}
	}
	vdpaInfo := func(addr, driver, path string) *devinfo.DeviceInfo {
		return &devinfo.DeviceInfo{Type: devinfo.TypeVDPA, Version: devinfo.Version, Vdpa: &devinfo.VdpaDevice{PciAddress: addr, Driver: driver, Path: path}}
	}
	dev := func(id string, info *devinfo.DeviceInfo, nodes ...string) source.Device {
		d := source.Device{Device: deviceplugin.Device{ID: id}, Info: info}
		for _, n := range nodes {
			d.DevNodes = append(d.DevNodes, node(n))
		}
		return d
	}
	devs := []source.Device{
		dev("0000:18:02.1", pciInfo("0000:18:02.1", ""), "/dev/vfio/vfio", "/dev/vfio/30"),
		dev("0000:3b:00.2", pciInfo("0000:3b:00.2", "mlx5_2"), "/dev/infiniband/issm2", "/dev/infiniband/umad2", "/dev/infiniband/uverbs2",
			"/dev/infiniband/rdma_cm", "/dev/vhost-net", "/dev/net/tun"),
		dev("0000:65:00.2", vdpaInfo("0000:65:00.2", "vhost", "/dev/vhost-vdpa-0"), "/dev/vhost-vdpa-0"),
		dev("0000:65:00.3", vdpaInfo("0000:65:00.3", "virtio", "/sys/bus/virtio/devices/virtio1")),
		dev("0000:18:02.3", pciInfo("0000:18:02.3", ""), "/dev/uio3"),
	}
	env, err := Env("PCIDEVICE_INTEL_COM_NIC", devs, map[string]map[string]string{
		"*": {"token": "original"}, "0000:65:00.3": {"token": "specific", "more": "x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := env["PCIDEVICE_INTEL_COM_NIC"]; got != "0000:18:02.1,0000:3b:00.2,0000:65:00.2,0000:65:00.3,0000:18:02.3" {
		t.Errorf("IDs %q", got)
	}
	var got map[string]map[string]map[string]string
	if err := json.Unmarshal([]byte(env["PCIDEVICE_INTEL_COM_NIC_INFO"]), &got); err != nil {
		t.Fatal(err)
	}
	extra := map[string]string{"token": "original"}
	want := map[string]map[string]map[string]string{
		"0000:18:02.1": {"generic": {"deviceID": "0000:18:02.1"}, "vfio": {"mount": "/dev/vfio/vfio", "dev-mount": "/dev/vfio/30"}, "extra": extra},
		"0000:3b:00.2": {"generic": {"deviceID": "0000:3b:00.2"}, "extra": extra,
			"rdma":  {"issm": "/dev/infiniband/issm2", "umad": "/dev/infiniband/umad2", "uverbs": "/dev/infiniband/uverbs2", "rdma_cm": "/dev/infiniband/rdma_cm", "rdma_dev": "mlx5_2"},
			"vhost": {"net-mount": "/dev/vhost-net", "tun-mount": "/dev/net/tun"}},
		"0000:65:00.2": {"generic": {"deviceID": "0000:65:00.2"}, "vdpa": {"mount": "/dev/vhost-vdpa-0"}, "extra": extra},
		"0000:65:00.3": {"generic": {"deviceID": "0000:65:00.3"}, "vdpa": {}, "extra": {"token": "specific", "more": "x"}},
		"0000:18:02.3": {"generic": {"deviceID": "0000:18:02.3"}, "uio": {"mount": "/dev/uio3"}, "extra": extra},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("_INFO:\n got %v\nwant %v", got, want)
	}
	// An SF (auxNetDevice) with RDMA: its entries name its RDMA device, and
	// additionalInfo keyed by its parent function applies to it, as the
	// plugin keys it.
	sf := dev("mlx5_core.sf.3", nil, "/dev/infiniband/uverbs3", "/dev/infiniband/rdma_cm")
	sf.Aux = &source.Aux{Parent: "0000:03:00.0", RDMADevice: "mlx5_3"}
	env, _ = Env("K", []source.Device{sf}, map[string]map[string]string{"0000:03:00.0": {"port": "p0"}, "mlx5_core.sf.3": {"x": "y"}})
	if env["K"] != "mlx5_core.sf.3" || env["K_INFO"] != `{"mlx5_core.sf.3":{"extra":{"port":"p0"},"generic":{"deviceID":"mlx5_core.sf.3"},`+
		`"rdma":{"rdma_cm":"/dev/infiniband/rdma_cm","rdma_dev":"mlx5_3","uverbs":"/dev/infiniband/uverbs3"}}}` {
		t.Errorf("SF: %v", env)
	}
	// Without additionalInfo there is no "extra" entry; an RDMA device
	// without RDMA nodes (no isRdma) is no "rdma" entry.
	env, _ = Env("K", []source.Device{dev("0000:3b:00.2", pciInfo("0000:3b:00.2", "mlx5_2"))}, nil)
	if env["K_INFO"] != `{"0000:3b:00.2":{"generic":{"deviceID":"0000:3b:00.2"}}}` {
		t.Errorf("plain: %s", env["K_INFO"])
	}
}
