package sriovdp

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// EnvKey is the variable naming a container's devices of a resource, as
// the plugin names it: PCIDEVICE_<PREFIX>_<NAME> in upper case with "." as
// "_" (a "-" in the name stays). Its JSON companion is EnvKey+"_INFO".
func EnvKey(prefix, name string) string {
	return strings.ToUpper(strings.ReplaceAll("PCIDEVICE_"+prefix+"_"+name, ".", "_"))
}

// Env is the environment the plugin gives a container holding devs: key
// with the comma-separated device IDs, and key_INFO with a JSON object
// mapping each ID to what the plugin's info providers say of it: "generic"
// (deviceID), "vfio" (mount, dev-mount), "uio" (mount), "rdma" (uverbs, umad, issm,
// rdma_cm, rdma_dev), "vhost" (net-mount, tun-mount), "vdpa" (mount) and
// "extra" (additionalInfo: "*" overridden by the device's own address, an
// auxiliary device's parent's),
// each only where it applies.
func Env(key string, devs []source.Device, additional map[string]map[string]string) (map[string]string, error) {
	ids := make([]string, 0, len(devs))
	info := make(map[string]map[string]map[string]string, len(devs))
	for _, d := range devs {
		ids = append(ids, d.ID)
		info[d.ID] = providers(d, additional)
	}
	js, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("%s_INFO: %w", key, err)
	}
	return map[string]string{key: strings.Join(ids, ","), key + "_INFO": string(js)}, nil
}

// providers is one device's entry of the _INFO object.
func providers(d source.Device, additional map[string]map[string]string) map[string]map[string]string {
	out := map[string]map[string]string{"generic": {"deviceID": d.ID}}
	for _, n := range d.DevNodes {
		p := n.ContainerPath
		switch {
		case p == "/dev/vfio/vfio":
			put(out, "vfio", "mount", p)
		case strings.HasPrefix(p, "/dev/vfio/"):
			put(out, "vfio", "dev-mount", p)
		case strings.HasPrefix(p, "/dev/infiniband/") && rdmaKey(p) != "":
			put(out, "rdma", rdmaKey(p), p)
		case strings.HasPrefix(p, "/dev/uio"):
			put(out, "uio", "mount", p)
		case p == "/dev/vhost-net":
			put(out, "vhost", "net-mount", p)
		case p == "/dev/net/tun":
			put(out, "vhost", "tun-mount", p)
		}
	}
	if rdma := rdmaDevice(d); out["rdma"] != nil && rdma != "" {
		put(out, "rdma", "rdma_dev", rdma)
	}
	if d.Info != nil && d.Info.Type == devinfo.TypeVDPA {
		out["vdpa"] = map[string]string{}
		if d.Info.Vdpa.Driver == devinfo.VdpaDriverVhost {
			out["vdpa"]["mount"] = d.Info.Vdpa.Path
		}
	}
	key := d.ID
	if d.Aux != nil {
		key = d.Aux.Parent // an auxiliary device's, as the plugin keys it
	}
	if extra := extraInfo(key, additional); extra != nil {
		out["extra"] = extra
	}
	return out
}

func put(m map[string]map[string]string, provider, key, value string) {
	if m[provider] == nil {
		m[provider] = map[string]string{}
	}
	m[provider][key] = value
}

// rdmaKey names an RDMA node in the plugin's "rdma" entry; "" for one the
// plugin hands out without naming it (ucmN).
func rdmaKey(path string) string {
	base := strings.TrimPrefix(path, "/dev/infiniband/")
	for _, k := range []string{"uverbs", "umad", "issm", "rdma_cm"} {
		if strings.HasPrefix(base, k) {
			return k
		}
	}
	return ""
}

// extraInfo is additionalInfo["*"] overlaid with additionalInfo[id]; nil
// when neither is given.
func extraInfo(id string, additional map[string]map[string]string) map[string]string {
	var out map[string]string
	for _, key := range []string{"*", id} {
		for k, v := range additional[key] {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// rdmaDevice names the device's RDMA device, "" when none.
func rdmaDevice(d source.Device) string {
	switch {
	case d.Aux != nil:
		return d.Aux.RDMADevice
	case d.Info != nil && d.Info.Pci != nil:
		return d.Info.Pci.RdmaDevice
	}
	return ""
}
