package dradevice

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// Extended resources backed by DRA (KEP-5004, GA in 1.37): a pod asks
// resources.limits {R: n} and a DeviceClass with spec.extendedResourceName R
// (or the implicit deviceclass.resource.kubernetes.io/<class>) lets a DRA
// driver serve it. The scheduler then makes one claim for all such requests
// of the pod, which no spec.resourceClaims entry names:
//   - annotation resource.kubernetes.io/extended-resource-claim: "true", the
//     pod its controlling owner, generateName <pod>-extended-resources-;
//   - a request per container and resource, "container-<i>-request-<j>";
//   - pod.status.extendedResourceClaimStatus naming the claim and mapping
//     each (container, resource) to its requests.

// ExtendedResourceClaimAnnotation marks the claim the scheduler made.
const ExtendedResourceClaimAnnotation = resourceapi.ExtendedResourceClaimAnnotation

// MappedRequests are the requests of the pod's extended-resource claim that
// serve resourceName, in any container, each once, in mapping order.
func MappedRequests(pod *corev1.Pod, resourceName string) []string {
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil || resourceName == "" {
		return nil
	}
	var out []string
	for _, m := range st.RequestMappings {
		if m.ResourceName == resourceName && !slices.Contains(out, m.RequestName) {
			out = append(out, m.RequestName)
		}
	}
	return out
}

// extendedDevices are the devices of the pod's extended-resource claim that
// fit the query: those allocated for a request mapped to its resource, and
// the others by their resourceName attribute, as for any claim. A claim that
// cannot serve is an error only when a request of the resource is mapped to
// it (else it is another resource's business).
func (r *resolver) extendedDevices(ctx context.Context) ([]Device, error) {
	st := r.pod.Status.ExtendedResourceClaimStatus
	if st == nil {
		return nil, nil
	}
	mapped := MappedRequests(r.pod, r.query.ResourceName)
	claim, err := r.extendedClaim(ctx, st.ResourceClaimName)
	if err != nil {
		if len(mapped) == 0 {
			return nil, nil
		}
		return nil, err
	}
	var out []Device
	for _, res := range claim.Status.Allocation.Devices.Results {
		// A share devplumb cannot shape is an error only when it is one of
		// the attachment's devices.
		c, shareErr := claimOf(claim, res)
		dev, err := r.device(ctx, c, slices.Contains(mapped, res.Request))
		if err == nil && dev != nil {
			err = shareErr
		}
		if err != nil {
			return nil, err
		}
		if dev != nil {
			out = append(out, *dev)
		}
	}
	if len(out) == 0 && len(mapped) > 0 {
		return nil, fmt.Errorf("%w: ResourceClaim %s/%s, made by the scheduler for the pod's extended resource %s (requests %v), "+
			"holds none of its devices on this node", ErrNoDevice, claim.Namespace, claim.Name, r.query.ResourceName, mapped)
	}
	return out, nil
}

// extendedClaim reads the claim pod.status.extendedResourceClaimStatus names
// and checks that it is the one the scheduler made for this pod (annotation,
// the pod its controlling owner), allocated and reserved for the pod.
func (r *resolver) extendedClaim(ctx context.Context, name string) (*resourceapi.ResourceClaim, error) {
	what := fmt.Sprintf("ResourceClaim %s/%s (status.extendedResourceClaimStatus)", r.pod.Namespace, name)
	claim, err := r.readClaim(ctx, name, what)
	if err != nil {
		return nil, err
	}
	if claim.Annotations[ExtendedResourceClaimAnnotation] != "true" {
		return nil, fmt.Errorf("%w: %s has no annotation %s=true: it is not the claim the scheduler made for extended resources",
			ErrNoDevice, what, ExtendedResourceClaimAnnotation)
	}
	if err := resourceclaim.IsForPod(r.pod, claim, podGroupClaims); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoDevice, what, err)
	}
	return claim, r.checkUsable(claim, what)
}
