// Package devinfo implements the NPWG Device Information Specification 1.1.0.
//
// A device plugin that hands a pod a network device (an SR-IOV VF, a vDPA
// device, a vhost-user or memif socket) describes it in a small JSON map, the
// device-info: a "type" (pci, vdpa, vhost-user or memif), the spec "version",
// and one map named after the type with that device's details. The map travels
// through two files under one directory (DefaultDir):
//
//   - dp/<resourceName>-<deviceID>-device.json, written by the device plugin
//     for each device it manages ("/" in resourceName replaced by "-");
//   - cni/<unique name>, one per network attachment, a copy of the DP file that
//     the NPWG implementation (devplumb, Multus) makes before calling the CNI
//     plugin, which may update it; its content ends in the pod's
//     network-status annotation under "device-info".
//
// The types are the NetworkAttachmentDefinition client's, so values and files
// are interchangeable with every tool built on it. Validate checks what the
// spec requires; Parse also refuses what Go's JSON decoding would forgive but
// other readers would not (a key in the wrong case, a key given twice), and
// keeps keys the spec does not name. Store reads and writes the two kinds of
// files atomically and refuses names that would leave the directory. Files of spec version 1.0.x and
// 1.1.x are read; files are written as 1.1.0.
//
// devinfo is one of devplumb's two public packages (with podresources): a
// stable API for device plugins and CNI plugins, versioned with the module.
// Everything under pkg/ is internal and may change in any release.
package devinfo
