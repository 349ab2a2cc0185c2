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
	"slices"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
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
// device, its first own CDI device of kind resourceName (see OwnCDIDevices).
// A device prepared with no such CDI device is not found here; the API path
// may find it. The claim the scheduler made for an extended resource backed
// by DRA (KEP-5004) is reported like any other claim, under the containers
// that request the resource: netdev-dp's devices of it are found here when
// the extended resource is named as their resource is. A driver's
// device-metadata kind (see isMetadata) names no device of its claims.
func Local(p *v1.PodResources, resourceName string) []Device {
	var out []Device
	seen := map[Claim]bool{}
	for _, ctr := range p.GetContainers() {
		for _, dr := range ctr.GetDynamicResources() {
			for i, cr := range dr.GetClaimResources() {
				c := Claim{Namespace: dr.GetClaimNamespace(), Name: dr.GetClaimName(),
					Driver: cr.GetDriverName(), Pool: cr.GetPoolName(), Device: cr.GetDeviceName()}
				id, ok := cdiDeviceID(OwnCDIDevices(dr, i), resourceName)
				if !ok || seen[c] || isMetadata(resourceName, cr) {
					continue
				}
				seen[c] = true
				out = append(out, Device{ResourceName: resourceName, ID: id, Claim: c})
			}
		}
	}
	return out
}

// OwnCDIDevices are the CDI device names of the i-th device of a reported
// claim that are its own. The kubelet (GetDynamicResources in
// pkg/kubelet/cm/container_manager_linux.go, 1.34 through 1.37) gathers
// the CDI devices of one driver's devices of a claim in one list and hands
// each device the list so far: of a claim with two devices of a driver the
// second is reported with the first's CDI devices and then its own. So a
// device's own are those no earlier device of the same driver in the claim
// has (all of them, from a kubelet that reports each device's alone).
func OwnCDIDevices(dr *v1.DynamicResource, i int) []string {
	crs := dr.GetClaimResources()
	earlier := map[string]bool{}
	for _, prev := range crs[:i] {
		if prev.GetDriverName() == crs[i].GetDriverName() {
			for _, d := range prev.GetCdiDevices() {
				earlier[d.GetName()] = true
			}
		}
	}
	var own []string
	for _, d := range crs[i].GetCdiDevices() {
		if !earlier[d.GetName()] {
			own = append(own, d.GetName())
		}
	}
	return own
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

// isMetadata: kind is the driver's KEP-5304 device-metadata CDI kind
// (<driver>/metadata, one per request, added by kubeletplugin): it names a
// file to mount, never a device, so its names are no device IDs.
func isMetadata(kind string, cr *v1.ClaimResource) bool {
	return kind == cr.GetDriverName()+"/metadata"
}

// CDIDeviceID is the device ID of an allocated device by the CDI rule: the
// name of its first CDI device of kind resourceName. cr's CDI devices are
// taken as they are: see OwnCDIDevices for a device the kubelet reports.
func CDIDeviceID(cr *v1.ClaimResource, resourceName string) (string, bool) {
	var names []string
	for _, d := range cr.GetCdiDevices() {
		names = append(names, d.GetName())
	}
	return cdiDeviceID(names, resourceName)
}

func cdiDeviceID(names []string, resourceName string) (string, bool) {
	if resourceName == "" {
		return "", false
	}
	for _, n := range names {
		vendor, class, name, err := parser.ParseQualifiedName(n)
		if err == nil && vendor+"/"+class == resourceName {
			return name, true
		}
	}
	return "", false
}

// localCDIDevices are the own CDI devices (OwnCDIDevices) of an allocated
// device in the kubelet's answer; nil when the kubelet does not report it.
func localCDIDevices(p *v1.PodResources, c Claim) []string {
	for _, ctr := range p.GetContainers() {
		for _, dr := range ctr.GetDynamicResources() {
			if dr.GetClaimNamespace() != c.Namespace || dr.GetClaimName() != c.Name {
				continue
			}
			for i, cr := range dr.GetClaimResources() {
				if cr.GetDriverName() == c.Driver && cr.GetPoolName() == c.Pool && cr.GetDeviceName() == c.Device {
					return OwnCDIDevices(dr, i)
				}
			}
		}
	}
	return nil
}
