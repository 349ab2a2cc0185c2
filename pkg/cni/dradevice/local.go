// Package dradevice finds the DRA device a devplumb attachment takes: from the
// kubelet's PodResources answer when that is enough (no API request), else
// from the API server (the pod, its ResourceClaim, the ResourceSlices of the
// allocated devices' driver on the node). It decides, the caller fetches:
// the API calls go through the API interface (pkg/cni/kube implements it).
//
// The device ID handed to the delegate is the device's attribute
// k8s.cni.cncf.io/deviceID when the API path read it. Without it (and always
// on the local path) it follows the CDI rule: a device of resource R is the
// CDI device "R=<ID>" the driver prepared for it, kind R, name the device
// ID. netdev-dp and KEP-4009 device plugins name their CDI devices that way
// (they keep an ID that is a valid CDI device name as it is; a driver whose
// IDs are not must publish the deviceID attribute).
package dradevice

import (
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"slices"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
)

// The device attributes devplumb reads (the same Multus reads).
const (
	AttrDeviceID     = "k8s.cni.cncf.io/deviceID"
	AttrResourceName = "k8s.cni.cncf.io/resourceName"
)

// Claim names one allocated device of one ResourceClaim: what a
// status.devices[] entry is keyed by (driver, pool, device), and the claim.
// It is what devplumb's state records (pkg/cni/attachment).
type Claim = attachment.ClaimDevice

// Status is devplumb's part of a device's status.devices[] entry in its
// claim (KEP-4817 networkData, and a Ready condition).
type Status struct {
	Claim
	InterfaceName   string
	IPs             []string // CIDR form, as the API requires
	HardwareAddress string
	Network         string // the CNI network, for the condition's message
}

// Device is a DRA device an attachment may take.
type Device struct {
	// ResourceName names the device's resource: the DP device-info file is
	// looked up by it and ID, and devplumb's records are kept per resource.
	ResourceName string
	ID           string
	Claim        Claim
}

// Local returns the pod's DRA devices of resourceName that the kubelet
// reports, by the CDI rule, in the kubelet's order: for each allocated
// device, its first CDI device of kind resourceName. A device prepared
// with no such CDI device is not found here; the API path may find it.
func Local(p *v1.PodResources, resourceName string) []Device {
	var out []Device
	seen := map[Claim]bool{}
	for _, ctr := range p.GetContainers() {
		for _, dr := range ctr.GetDynamicResources() {
			for _, cr := range dr.GetClaimResources() {
				c := Claim{Namespace: dr.GetClaimNamespace(), Name: dr.GetClaimName(),
					Driver: cr.GetDriverName(), Pool: cr.GetPoolName(), Device: cr.GetDeviceName()}
				id, ok := CDIDeviceID(cr, resourceName)
				if !ok || seen[c] {
					continue
				}
				seen[c] = true
				out = append(out, Device{ResourceName: resourceName, ID: id, Claim: c})
			}
		}
	}
	return out
}

// LocalAll is Local, or with resourceName "" the devices of every resource
// (CDI kind) the kubelet reports for the pod.
func LocalAll(p *v1.PodResources, resourceName string) []Device {
	if resourceName != "" {
		return Local(p, resourceName)
	}
	var kinds []string
	for _, ctr := range p.GetContainers() {
		for _, dr := range ctr.GetDynamicResources() {
			for _, cr := range dr.GetClaimResources() {
				for _, d := range cr.GetCdiDevices() {
					vendor, class, _, err := parser.ParseQualifiedName(d.GetName())
					if kind := vendor + "/" + class; err == nil && !slices.Contains(kinds, kind) {
						kinds = append(kinds, kind)
					}
				}
			}
		}
	}
	var out []Device
	for _, kind := range kinds {
		out = append(out, Local(p, kind)...)
	}
	return out
}

// CDIDeviceID is the device ID of an allocated device by the CDI rule: the
// name of its first CDI device of kind resourceName.
func CDIDeviceID(cr *v1.ClaimResource, resourceName string) (string, bool) {
	if resourceName == "" {
		return "", false
	}
	for _, d := range cr.GetCdiDevices() {
		vendor, class, name, err := parser.ParseQualifiedName(d.GetName())
		if err == nil && vendor+"/"+class == resourceName {
			return name, true
		}
	}
	return "", false
}

// localResource finds the kubelet's record of an allocated device, if it
// reports it.
func localResource(p *v1.PodResources, c Claim) *v1.ClaimResource {
	for _, ctr := range p.GetContainers() {
		for _, dr := range ctr.GetDynamicResources() {
			if dr.GetClaimNamespace() != c.Namespace || dr.GetClaimName() != c.Name {
				continue
			}
			for _, cr := range dr.GetClaimResources() {
				if cr.GetDriverName() == c.Driver && cr.GetPoolName() == c.Pool && cr.GetDeviceName() == c.Device {
					return cr
				}
			}
		}
	}
	return nil
}
