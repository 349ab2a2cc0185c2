package devinfo

import (
	"fmt"
	"regexp"
	"strings"
)

// pciAddressRE is a full PCI address (domain:bus:device.function).
var pciAddressRE = regexp.MustCompile(`^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// CheckFiledUnder reports a device-info file whose PCI address contradicts
// the device ID it is filed under: a device plugin that filed one device's
// description under another's ID (by mistake, or a rogue one steering a
// delegate to a device the pod was not given). Only a device ID that is a
// PCI address can be compared; vdpa and socket devices have other IDs.
func CheckFiledUnder(info *DeviceInfo, deviceID string) error {
	if info == nil || !pciAddressRE.MatchString(deviceID) {
		return nil
	}
	var addr string
	switch {
	case info.Pci != nil:
		addr = info.Pci.PciAddress
	case info.Vdpa != nil:
		addr = info.Vdpa.PciAddress
	}
	if addr == "" || strings.EqualFold(addr, deviceID) {
		return nil
	}
	return fmt.Errorf("device-info filed under device %s describes PCI device %s", deviceID, addr)
}

// dpNamePCI finds the PCI address a DP file name ends in
// ("<resource>-<PCI address>-device.json"), if it does.
var dpNamePCI = regexp.MustCompile(`-([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])-device\.json$`)

// DeviceIDOfDPName returns the device ID a device plugin file's name ends
// in when that ID is a PCI address (the only kind a name tells apart from
// the resource name before it).
func DeviceIDOfDPName(name string) (string, bool) {
	m := dpNamePCI.FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	return m[1], true
}
