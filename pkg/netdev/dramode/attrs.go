package dramode

import (
	"fmt"
	"hash/fnv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
)

// The attributes every device carries, read by devplumb and Multus: the
// device ID exactly as device-plugin mode names it, and the resource name
// a NetworkAttachmentDefinition's k8s.v1.cni.cncf.io/resourceName matches.
const (
	AttrDeviceID     resourceapi.QualifiedName = "k8s.cni.cncf.io/deviceID"
	AttrResourceName resourceapi.QualifiedName = "k8s.cni.cncf.io/resourceName"
)

// The typed attributes, under the driver's own domain ("<driver>/<name>").
const (
	AttrType          = "type"          // pci, netdev, vdpa, vhostuser, memif
	AttrPCIAddress    = "pciAddress"    // the device's PCI function
	AttrPFName        = "pfName"        // netdev name of its PF (of a PF: its own)
	AttrNUMANode      = "numaNode"      // int
	AttrInterfaceName = "interfaceName" // its host netdev name, if it has one
	AttrSocketPath    = "socketPath"    // vhost-user / memif socket
)

// sourceTypes maps a device source's Kind to the type attribute.
var sourceTypes = map[string]string{"pci": "pci", "netdevs": "netdev", "vdpa": "vdpa", "vhostuser": "vhostuser", "memif": "memif"}

// DeviceName is a device's name in the ResourceSlice: a DNS label. An ID
// that is one already (an interface name like "eth1", "vdpa0") is kept.
// Any other ID (a PCI address "0000:01:00.2", a socket "vhu0.sock", upper
// case, too long) is lower-cased, every character other than a-z, 0-9 and
// "-" becomes "-", it is cut to leave room, and "-" plus eight hex digits of
// FNV-1a over "<resourceName>\x00<ID>" are appended, so the name stays the
// same for the same device and two resources' IDs do not meet. Nobody is
// meant to parse the name: the ID travels in AttrDeviceID.
func DeviceName(resourceName, id string) string {
	if len(validation.IsDNS1123Label(id)) == 0 {
		return id
	}
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	h := fnv.New32a()
	h.Write([]byte(resourceName + "\x00" + id))
	suffix := fmt.Sprintf("%08x", h.Sum32())
	base := b.String()
	if max := validation.DNS1123LabelMaxLength - len(suffix) - 1; len(base) > max {
		base = base[:max]
	}
	base = strings.Trim(base, "-")
	if base == "" {
		return "d-" + suffix
	}
	return base + "-" + suffix
}

// attributes describes one device for selectors. sysfs is read for the
// PCI device's own and its PF's netdev names. Strings longer than the API
// allows are left out (dropped reports their names).
func attributes(driver, resourceName, kind, sysfsRoot string, d source.Device) (attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, dropped []string) {
	attrs = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	str := func(name resourceapi.QualifiedName, v string) {
		switch {
		case v == "":
		case len(v) > resourceapi.DeviceAttributeMaxValueLength:
			dropped = append(dropped, string(name))
		default:
			attrs[name] = resourceapi.DeviceAttribute{StringValue: &v}
		}
	}
	own := func(n string) resourceapi.QualifiedName { return resourceapi.QualifiedName(driver + "/" + n) }
	str(AttrDeviceID, d.ID)
	str(AttrResourceName, resourceName)
	str(own(AttrType), sourceTypes[kind])
	if d.NUMANode != deviceplugin.NoNUMA {
		n := int64(d.NUMANode)
		attrs[own(AttrNUMANode)] = resourceapi.DeviceAttribute{IntValue: &n}
	}
	if kind == "netdevs" {
		str(own(AttrInterfaceName), d.ID)
	}
	standardAttributes(attrs, sysfsRoot, d)
	if d.Info == nil {
		return attrs, dropped
	}
	switch {
	case d.Info.Pci != nil:
		str(own(AttrPCIAddress), d.Info.Pci.PciAddress)
		pf, ifName := pciNames(sysfsRoot, d.Info.Pci.PciAddress, d.Info.Pci.PfPciAddress)
		str(own(AttrPFName), pf)
		if kind == "pci" {
			str(own(AttrInterfaceName), ifName)
		}
	case d.Info.Vdpa != nil:
		str(own(AttrPCIAddress), d.Info.Vdpa.PciAddress)
	case d.Info.VhostUser != nil:
		str(own(AttrSocketPath), d.Info.VhostUser.Path)
	case d.Info.Memif != nil:
		str(own(AttrSocketPath), d.Info.Memif.Path)
	}
	return attrs, dropped
}

// pciNames reads the netdev names of a PCI function's PF (its own for a PF)
// and of the function itself; "" where sysfs shows none (a VF bound to
// vfio-pci has no netdev).
func pciNames(sysfsRoot, addr, pfAddr string) (pf, own string) {
	first := func(addr string) string {
		if addr == "" {
			return ""
		}
		d, err := sysfs.Read(sysfsRoot, addr)
		if err != nil || len(d.NetDevs) == 0 {
			return ""
		}
		return d.NetDevs[0]
	}
	own = first(addr)
	if pfAddr == "" {
		return own, own
	}
	return first(pfAddr), own
}
