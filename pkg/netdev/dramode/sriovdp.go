package dramode

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/sriovdp"
)

// standardAttributes adds Kubernetes' standard attributes of a PCI device
// (k8s.io/dynamic-resource-allocation/deviceattribute): its PCI address,
// its PCIe root complex (read from sysfsRoot), and its NUMA node when it
// reports one (a resource with excludeTopology reports none). An auxiliary
// device (an SF) is no PCI function, so it has no PCI address, but it sits
// on its PF's PCIe root complex, which a claim may align it by.
func standardAttributes(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, sysfsRoot string, d source.Device) {
	addr, root := "", ""
	switch {
	case d.Info != nil && d.Info.Pci != nil:
		addr = d.Info.Pci.PciAddress
	case d.Info != nil && d.Info.Vdpa != nil:
		addr = d.Info.Vdpa.PciAddress
	case d.Aux != nil:
		root = d.Aux.Parent
	}
	if addr != "" {
		a := addr
		attrs[deviceattribute.StandardDeviceAttributePCIBusID] = resourceapi.DeviceAttribute{StringValue: &a}
		root = addr
	}
	if root != "" {
		if r, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(root, deviceattribute.WithFSFromRoot(sysfsRoot)); err == nil {
			attrs[r.Name] = r.Value
		}
	}
	if d.NUMANode != deviceplugin.NoNUMA {
		if n, err := deviceattribute.GetNUMANodeAttribute(d.NUMANode, deviceattribute.ScalarAttribute); err == nil {
			attrs[n.Name] = n.Value
		}
	}
}

// sriovEnv gives a claim the environment the SR-IOV device plugin gives a
// container: for each resource of that plugin's config, the claim's first
// device of it carries PCIDEVICE_<PREFIX>_<NAME> and _INFO naming all the
// claim's devices of it (one variable per resource, as a container of the
// plugin gets).
func (d *Driver) sriovEnv(rec *record) error {
	for _, r := range d.resources {
		if r.sriov == nil {
			continue
		}
		var idx []int
		var devs []source.Device
		for i, p := range rec.Devices {
			if p.Resource == r.name {
				idx, devs = append(idx, i), append(devs, p.Device)
			}
		}
		if len(idx) == 0 {
			continue
		}
		env, err := sriovdp.Env(sriovdp.EnvKey(r.sriov.Prefix, r.sriov.Name), devs, r.sriov.AdditionalInfo)
		if err != nil {
			return fmt.Errorf("resource %s: %w", r.name, err)
		}
		first := &rec.Devices[idx[0]].Device
		first.Env = slices.Clone(first.Env)
		for _, k := range sortedKeys(env) {
			first.Env = append(first.Env, k+"="+env[k])
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// DeviceClasses are the DeviceClasses that serve each resource of cfg by
// its name through driver: a class selecting the driver's devices whose
// k8s.cni.cncf.io/resourceName is the resource, with extendedResourceName
// the resource (KEP-5004), so a pod asking "intel.com/sriov_net: 1" gets a
// claim of it. The class of "intel.com/sriov_net" is
// "sriov-net.intel.com".
func DeviceClasses(cfg *resources.Config, driver string) ([]resourceapi.DeviceClass, error) {
	var out []resourceapi.DeviceClass
	seen := map[string]string{}
	for _, r := range cfg.Resources {
		name := ClassName(r.ResourceName)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return nil, fmt.Errorf("resource %s: DeviceClass name %q: %s", r.ResourceName, name, strings.Join(errs, "; "))
		}
		if other, dup := seen[name]; dup {
			return nil, fmt.Errorf("resources %s and %s would both be served by DeviceClass %q", other, r.ResourceName, name)
		}
		seen[name] = r.ResourceName
		ext := r.ResourceName
		out = append(out, resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{
				ExtendedResourceName: &ext,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(
					"device.driver == %q && device.attributes[%q].resourceName == %q", driver, "k8s.cni.cncf.io", r.ResourceName)}}},
			},
		})
	}
	return out, nil
}

// ClassName is the DeviceClass name of a resource "domain/name": name,
// lower case with "_" as "-", then "." and the domain.
func ClassName(resourceName string) string {
	domain, name, _ := strings.Cut(resourceName, "/")
	return strings.ToLower(strings.ReplaceAll(name, "_", "-")) + "." + domain
}
