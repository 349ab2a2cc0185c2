package devinfo

import (
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
)

// DeviceInfo is the device-info map (spec section 3).
type DeviceInfo = nadv1.DeviceInfo

// PciDevice is the "pci" map of a device-info.
type PciDevice = nadv1.PciDevice

// VdpaDevice is the "vdpa" map of a device-info.
type VdpaDevice = nadv1.VdpaDevice

// VhostDevice is the "vhost-user" map of a device-info.
type VhostDevice = nadv1.VhostDevice

// MemifDevice is the "memif" map of a device-info.
type MemifDevice = nadv1.MemifDevice

// Version is the spec version this package writes.
const Version = nadv1.DeviceInfoVersion

// The device types of spec section 3.1.1.
const (
	TypePCI       = nadv1.DeviceInfoTypePCI
	TypeVDPA      = nadv1.DeviceInfoTypeVDPA
	TypeVhostUser = nadv1.DeviceInfoTypeVHostUser
	TypeMemif     = nadv1.DeviceInfoTypeMemif
)

// Enumerated values of the spec.
const (
	VdpaDriverVhost  = "vhost"
	VdpaDriverVirtio = "virtio"

	VhostUserModeClient = "client"
	VhostUserModeServer = "server"

	MemifRoleMaster     = "master"
	MemifRoleSlave      = "slave"
	MemifModeEthernet   = "ethernet"
	MemifModeIP         = "ip"
	MemifModeInjectPunt = "inject-punt"
)
