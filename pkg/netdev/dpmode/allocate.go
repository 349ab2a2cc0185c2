package dpmode

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/sriovdp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// allocate builds one container's response: an env var naming the IDs, the
// device nodes and mounts the devices need, and the CDI device names both in
// cdi_devices (KEP-4009) and in a cdi.k8s.io/ annotation for runtimes that
// only read annotations. The framework has checked the IDs.
func (r *resource) allocate(_ context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	devs := make([]source.Device, 0, len(ids))
	for _, id := range ids {
		pd, ok := r.dp.Lookup(id)
		d, isDevice := pd.Detail.(source.Device)
		if !ok || !isDevice {
			return nil, fmt.Errorf("device %q left the source", id)
		}
		devs = append(devs, d)
	}

	env, err := r.env(ids, devs)
	if err != nil {
		return nil, err
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: env}
	seenNode := map[string]bool{}
	var names []string
	for _, d := range devs {
		for _, n := range d.DevNodes {
			if !seenNode[n.HostPath] { // /dev/vfio/vfio is shared by all VFs
				seenNode[n.HostPath] = true
				resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{HostPath: n.HostPath, ContainerPath: n.ContainerPath, Permissions: n.Permissions})
			}
		}
		for _, m := range d.Mounts {
			resp.Mounts = append(resp.Mounts, &pluginapi.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
		}
		name := r.cdi.QualifiedName(d.ID)
		names = append(names, name)
		resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: name})
	}
	ann, err := cdiAnnotations(r.name, ids, names)
	if err != nil {
		return nil, err
	}
	resp.Annotations = ann
	return resp, nil
}

// env names the allocated devices. A resource of the SR-IOV device plugin's
// config gets what that plugin gives: PCIDEVICE_<PREFIX>_<NAME> and its
// _INFO; netdev-dp's own pci resource PCIDEVICE_<RESOURCE> and its _INFO;
// the other sources <KIND>DEVICE_<RESOURCE> alone.
func (r *resource) env(ids []string, devs []source.Device) (map[string]string, error) {
	switch {
	case r.sriov != nil:
		return sriovdp.Env(sriovdp.EnvKey(r.sriov.Prefix, r.sriov.Name), devs, r.sriov.AdditionalInfo)
	case r.source.Kind() == "pci":
		return sriovdp.Env(envName("pci", r.name), devs, nil)
	}
	return map[string]string{envName(r.source.Kind(), r.name): strings.Join(ids, ",")}, nil
}

// cdiAnnotations builds the cdi.k8s.io/ annotation with the CDI library. Its
// key must be unique per container across plugins and at most 63
// characters: "<resource, / as _>_<first device>", else a hash of the IDs.
func cdiAnnotations(resourceName string, ids, names []string) (map[string]string, error) {
	plugin := strings.ReplaceAll(resourceName, "/", "_")
	h := fnv.New32a()
	h.Write([]byte(resourceName + "\x00" + strings.Join(ids, ",")))
	hash := fmt.Sprintf("%08x", h.Sum32())
	var lastErr error
	for _, try := range [][2]string{{plugin, safeKeyPart(ids[0])}, {plugin, hash}, {"netdev-dp", hash}} {
		ann, err := cdi.UpdateAnnotations(nil, try[0], try[1], names)
		if err == nil {
			return ann, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("CDI annotation for %v: %w", ids, lastErr)
}

// safeKeyPart keeps the characters an annotation key name allows.
func safeKeyPart(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 128 && (r == '-' || r == '_' || r == '.' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')) {
			return r
		}
		return '_'
	}, s)
}
