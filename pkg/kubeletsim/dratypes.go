package kubeletsim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// DRAOptions turn on the DRA part of the node: DRA kubelet plugins register
// in ROOT/plugins_registry, and pods with claims are admitted through the API
// server that Client talks to, on node NodeName.
type DRAOptions struct {
	Client   kubernetes.Interface
	NodeName string
	// WipeDelay is how long after a driver deregistered its ResourceSlices
	// of the node are deleted (DefaultWipeDelay when 0; negative: never).
	WipeDelay time.Duration
}

// PodClaim is one entry of a pod's spec.resourceClaims: a pod claim Name and
// exactly one of a ResourceClaim's name or a ResourceClaimTemplate's name.
type PodClaim struct {
	Name                      string `json:"name"`
	ResourceClaimName         string `json:"resourceClaimName,omitempty"`
	ResourceClaimTemplateName string `json:"resourceClaimTemplateName,omitempty"`
}

// PreparedClaim is a ResourceClaim the node prepared for a pod: what the
// kubelet keeps in its DRA checkpoint and reports through PodResources.
type PreparedClaim struct {
	PodClaim  string `json:"podClaim"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// OwnedByPod: generated from a template for this pod, or by the
	// scheduler for its extended resources; deleted with it.
	OwnedByPod bool `json:"ownedByPod,omitempty"`
	// Extended: the claim the scheduler made for the pod's extended
	// resources that DRA serves (PodClaim is ""); the kubelet reports it
	// for the containers the pod's status.extendedResourceClaimStatus maps.
	Extended bool `json:"extended,omitempty"`
	// Drivers are the drivers of the claim's allocation, sorted: each was
	// asked to prepare it and is asked to unprepare it.
	Drivers []string `json:"drivers"`
	// Devices as the drivers' NodePrepareResources answered, drivers in order.
	Devices []PreparedDevice `json:"devices"`
}

// PreparedDevice is one device of a driver's NodePrepareResources answer.
type PreparedDevice struct {
	Driver       string   `json:"driver"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	Requests     []string `json:"requests,omitempty"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
}

func cloneClaims(in []PreparedClaim) []PreparedClaim {
	if in == nil {
		return nil
	}
	out := make([]PreparedClaim, len(in))
	for i, c := range in {
		out[i] = c
		out[i].Drivers = slices.Clone(c.Drivers)
		out[i].Devices = make([]PreparedDevice, len(c.Devices))
		for j, d := range c.Devices {
			d.Requests = slices.Clone(d.Requests)
			d.CDIDeviceIDs = slices.Clone(d.CDIDeviceIDs)
			out[i].Devices[j] = d
		}
	}
	return out
}

// validateClaims checks the pod's claims and the containers' references to
// them, as API validation would.
func validateClaims(spec PodSpec) error {
	seen := map[string]bool{}
	for _, c := range spec.Claims {
		if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
			return fmt.Errorf("pod claim name %q: %s", c.Name, strings.Join(errs, "; "))
		}
		if seen[c.Name] {
			return fmt.Errorf("pod claim %q given twice", c.Name)
		}
		seen[c.Name] = true
		if (c.ResourceClaimName == "") == (c.ResourceClaimTemplateName == "") {
			return fmt.Errorf("pod claim %q: exactly one of a ResourceClaim and a ResourceClaimTemplate must be named", c.Name)
		}
		src := c.ResourceClaimName + c.ResourceClaimTemplateName
		if errs := validation.IsDNS1123Subdomain(src); len(errs) > 0 {
			return fmt.Errorf("pod claim %q: name %q: %s", c.Name, src, strings.Join(errs, "; "))
		}
	}
	for _, ctr := range spec.Containers {
		refs := map[string]bool{}
		for _, r := range ctr.Claims {
			name, request, hasRequest := strings.Cut(r, "/")
			if !seen[name] {
				return fmt.Errorf("container %q references claim %q, which is not a claim of the pod", ctr.Name, name)
			}
			if errs := validation.IsDNS1123Label(request); hasRequest && len(errs) > 0 {
				return fmt.Errorf("container %q: request %q of claim %q: %s", ctr.Name, request, name, strings.Join(errs, "; "))
			}
			if refs[r] {
				return fmt.Errorf("container %q references claim %q twice", ctr.Name, r)
			}
			refs[r] = true
		}
	}
	return nil
}

// claimName is the pod claim a container's reference names.
func claimName(ref string) string {
	name, _, _ := strings.Cut(ref, "/")
	return name
}
