package dramode

import (
	"path/filepath"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/devplumb/devplumb/devinfo"
)

// metadataVersions are the KEP-5304 metadata versions written, newest first:
// kubeletplugin requires the newest it knows to be named explicitly.
var metadataVersions = []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}

// The metadata attributes a container reads besides the slice's (attrs.go):
// the device-info fields (NPWG Device Information Specification), under the
// driver's domain. A value longer than the API's 64 characters is left out,
// as in the slice; the DP device-info file still has it.
const (
	AttrDeviceInfoType    = "deviceInfoType"    // pci, vdpa, vhost-user, memif
	AttrDeviceInfoVersion = "deviceInfoVersion" // the spec's version, e.g. 1.1.0
	AttrPFPCIAddress      = "pfPciAddress"
	AttrVhostNet          = "vhostNet"          // pci: its vhost-net device
	AttrRDMADevice        = "rdmaDevice"        // pci: its RDMA device
	AttrRepresentor       = "representorDevice" // pci, vdpa
	AttrVDPAParent        = "vdpaParentDevice"
	AttrVDPADriver        = "vdpaDriver" // vhost or virtio
	AttrVDPAPath          = "vdpaPath"   // its /dev node
	AttrSocketMode        = "socketMode" // vhost-user mode, or memif mode
	AttrMemifRole         = "memifRole"
	AttrCDIDevice         = "cdiDevice" // the CDI device the container got
	AttrShareID           = "shareID"   // a share: its allocation's share ID
	AttrShareParent       = "shareParent"
	AttrShareBandwidth    = "shareBandwidth" // bit/s
)

// metadata describes a prepared device for the containers that use it
// (kubeletplugin writes it when Options.Metadata is on): its slice
// attributes, the standard PCI bus ID, its device-info fields and its CDI
// device name, so an application finds its device without parsing
// environment variables.
func (d *Driver) metadata(p preparedDevice) *kubeletplugin.DeviceMetadata {
	kind := ""
	for _, r := range d.resources {
		if r.name == p.Resource {
			kind = r.source.Kind()
		}
	}
	attrs, _ := attributes(d.name, p.Resource, kind, d.sysfs, p.Device)
	out := map[string]resourceapi.DeviceAttribute{}
	for k, v := range attrs {
		out[string(k)] = v
	}
	str := func(name, v string) {
		if v != "" && len(v) <= resourceapi.DeviceAttributeMaxValueLength {
			out[name] = resourceapi.DeviceAttribute{StringValue: &v}
		}
	}
	own := func(n string) string { return d.name + "/" + n }
	str(own(AttrCDIDevice), p.CDI)
	if sh := p.Share; sh != nil {
		str(own(AttrInterfaceName), sh.Interface) // the parent's: the share's own is made by devplumb
		str(own(AttrShareID), sh.ID)
		str(own(AttrShareParent), sh.Parent)
		str(own(AttrShareBandwidth), strconv.FormatInt(sh.Bandwidth, 10))
	}
	if info := p.Device.Info; info != nil {
		str(own(AttrDeviceInfoType), info.Type)
		str(own(AttrDeviceInfoVersion), info.Version)
		infoAttrs(info, func(n, v string) { str(own(n), v) })
		if info.Pci != nil {
			str(string(deviceattribute.StandardDeviceAttributePCIBusID), info.Pci.PciAddress)
		}
	}
	return &kubeletplugin.DeviceMetadata{Attributes: out}
}

// infoAttrs names each field of a device-info for the metadata.
func infoAttrs(info *devinfo.DeviceInfo, str func(name, value string)) {
	switch {
	case info.Pci != nil:
		str(AttrPCIAddress, info.Pci.PciAddress)
		str(AttrPFPCIAddress, info.Pci.PfPciAddress)
		str(AttrVhostNet, info.Pci.Vhostnet)
		str(AttrRDMADevice, info.Pci.RdmaDevice)
		str(AttrRepresentor, info.Pci.RepresentorDevice)
	case info.Vdpa != nil:
		str(AttrPCIAddress, info.Vdpa.PciAddress)
		str(AttrPFPCIAddress, info.Vdpa.PfPciAddress)
		str(AttrVDPAParent, info.Vdpa.ParentDevice)
		str(AttrVDPADriver, info.Vdpa.Driver)
		str(AttrVDPAPath, info.Vdpa.Path)
		str(AttrRepresentor, info.Vdpa.RepresentorDevice)
	case info.VhostUser != nil:
		str(AttrSocketPath, info.VhostUser.Path)
		str(AttrSocketMode, info.VhostUser.Mode)
	case info.Memif != nil:
		str(AttrSocketPath, info.Memif.Path)
		str(AttrSocketMode, info.Memif.Mode)
		str(AttrMemifRole, info.Memif.Role)
	}
}

// cdiDir is where the CDI specs go, the metadata's too: the dir the
// resources' CDI writers write to.
func (d *Driver) cdiDir() string {
	if len(d.resources) == 0 {
		return kubeletplugin.DefaultCDIDir
	}
	return filepath.Dir(d.resources[0].cdi.Path())
}
