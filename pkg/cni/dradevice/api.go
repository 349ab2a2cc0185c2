package dradevice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/base/netshare"
)

// API is what the API path reads: one pod, one ResourceClaim, and the
// ResourceSlices of one driver on one node. Each call is one request; a
// missing object is an error for which IsNotFound holds.
type API interface {
	// Pod reads the pod; uid, when set, is the one CNI was called for.
	Pod(ctx context.Context, namespace, name, uid string) (*corev1.Pod, error)
	ResourceClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
	ResourceSlices(ctx context.Context, node, driver string) ([]resourceapi.ResourceSlice, error)
	IsNotFound(err error) bool
}

// podGroupClaims is false: claims made for a pod's PodGroup (the alpha
// DRAWorkloadResourceClaims gate, off by default through 1.37) are not
// supported, so only the pod's own claims and reservations count.
const podGroupClaims = false

// ErrNoDevice marks an answer that gives the attachment no device: the
// claim is missing, not allocated, not for this pod, shared, or holds no
// device that fits. Other errors are the API server's.
var ErrNoDevice = errors.New("no DRA device")

// Query says which devices to look for.
type Query struct {
	Namespace, Pod, UID string
	// PodClaim is the pod-spec claim name ("resourceClaim"); empty: every
	// claim of the pod, matched by ResourceName.
	PodClaim string
	Request  string
	// ResourceName, when set, is what a device's resourceName attribute
	// must be; with PodClaim it is also the resource of a device without it.
	ResourceName string
	// Local is the kubelet's answer for the pod, if there is one: the CDI
	// rule gives the ID of a device without the deviceID attribute.
	Local *v1.PodResources
}

// Resolve reads the pod and its claims and returns the devices that fit q,
// in the order of the pod's claims and their allocation results.
func Resolve(ctx context.Context, api API, q Query) ([]Device, error) {
	pod, err := api.Pod(ctx, q.Namespace, q.Pod, q.UID)
	if err != nil {
		if api.IsNotFound(err) {
			return nil, fmt.Errorf("%w: pod %s/%s does not exist: %w", ErrNoDevice, q.Namespace, q.Pod, err)
		}
		return nil, fmt.Errorf("read pod %s/%s: %w", q.Namespace, q.Pod, err)
	}
	if q.UID != "" && string(pod.UID) != q.UID {
		return nil, fmt.Errorf("%w: pod %s/%s has UID %s, CNI was called for %s (deleted and created again)",
			ErrNoDevice, q.Namespace, q.Pod, pod.UID, q.UID)
	}
	podClaims, err := podClaimsOf(pod, q.PodClaim)
	if err != nil {
		return nil, err
	}
	r := &resolver{api: api, query: q, pod: pod, slices: map[string][]resourceapi.ResourceSlice{}}
	var out []Device
	for i := range podClaims {
		devs, err := r.claimDevices(ctx, &podClaims[i])
		if err != nil {
			return nil, err
		}
		out = append(out, devs...)
	}
	if q.PodClaim == "" {
		devs, err := r.extendedDevices(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, devs...)
	}
	return out, nil
}

// podClaimsOf is the pod's claim named name, or all its claims.
func podClaimsOf(pod *corev1.Pod, name string) ([]corev1.PodResourceClaim, error) {
	if name == "" {
		return pod.Spec.ResourceClaims, nil
	}
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.Name == name {
			return []corev1.PodResourceClaim{pc}, nil
		}
	}
	var have []string
	for _, pc := range pod.Spec.ResourceClaims {
		have = append(have, pc.Name)
	}
	return nil, fmt.Errorf("%w: pod %s/%s has no claim %q in spec.resourceClaims (it has %s): fix \"resourceClaim\" or the pod",
		ErrNoDevice, pod.Namespace, pod.Name, name, listOrNone(have))
}

type resolver struct {
	api    API
	query  Query
	pod    *corev1.Pod
	slices map[string][]resourceapi.ResourceSlice // by driver: one list per driver
}

// claimDevices reads the ResourceClaim of one pod claim and returns its
// allocated devices that fit the query. With the claim named by the config,
// a claim that cannot serve is an error; matched by resourceName, a claim
// is only an error when it has devices of the resource (a pod's other
// claims, e.g. a GPU shared by pods, are none of devplumb's business).
func (r *resolver) claimDevices(ctx context.Context, pc *corev1.PodResourceClaim) ([]Device, error) {
	claim, err := r.claim(ctx, pc)
	if claim == nil || err != nil {
		if errors.Is(err, ErrNoDevice) && r.query.PodClaim == "" {
			return nil, nil
		}
		return nil, err
	}
	var out []Device
	for _, res := range claim.Status.Allocation.Devices.Results {
		if r.query.Request != "" && res.Request != r.query.Request && resourceclaim.BaseRequestRef(res.Request) != r.query.Request {
			continue
		}
		// A share devplumb cannot shape is an error only when it is one of
		// the attachment's devices.
		c, shareErr := claimOf(claim, res)
		dev, err := r.device(ctx, c, false)
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
	if len(out) == 0 && r.query.PodClaim != "" {
		return nil, r.noDevice(claim)
	}
	if pods := reservedPods(claim); len(out) > 0 && len(pods) > 1 {
		return nil, fmt.Errorf("%w: ResourceClaim %s/%s (pod claim %q) is reserved for %d pods (%s): a network device is in one "+
			"network namespace at a time, so devplumb attaches a claim's devices to one pod: give each pod its own claim "+
			"(a ResourceClaimTemplate)", ErrNoDevice, claim.Namespace, claim.Name, pc.Name, len(pods), strings.Join(pods, ", "))
	}
	return out, nil
}

// claim reads the ResourceClaim of a pod claim and checks it is this pod's
// to use: allocated and reserved for the pod. A pod claim the pod does not
// use (no claim made for it) is nil.
func (r *resolver) claim(ctx context.Context, pc *corev1.PodResourceClaim) (*resourceapi.ResourceClaim, error) {
	pod := r.pod
	name, mustCheckOwner, err := resourceclaim.Name(pod, pc)
	if err != nil {
		return nil, fmt.Errorf("%w: pod %s/%s claim %q: %w", ErrNoDevice, pod.Namespace, pod.Name, pc.Name, err)
	}
	if name == nil {
		return nil, nil
	}
	what := fmt.Sprintf("ResourceClaim %s/%s (pod claim %q)", pod.Namespace, *name, pc.Name)
	claim, err := r.readClaim(ctx, *name, what)
	if err != nil {
		return nil, err
	}
	if mustCheckOwner {
		if err := resourceclaim.IsForPod(pod, claim, podGroupClaims); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrNoDevice, what, err)
		}
	}
	return claim, r.checkUsable(claim, what)
}

// readClaim reads one of the pod's claims; what names it in errors.
func (r *resolver) readClaim(ctx context.Context, name, what string) (*resourceapi.ResourceClaim, error) {
	claim, err := r.api.ResourceClaim(ctx, r.pod.Namespace, name)
	if err != nil {
		if r.api.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s does not exist: %w", ErrNoDevice, what, err)
		}
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return claim, nil
}

// checkUsable checks that the pod's claim is allocated and reserved for it.
func (r *resolver) checkUsable(claim *resourceapi.ResourceClaim, what string) error {
	pod := r.pod
	if claim.Status.Allocation == nil {
		return fmt.Errorf("%w: %s is not allocated: the scheduler allocates it before the pod starts", ErrNoDevice, what)
	}
	if !resourceclaim.IsReservedForPod(pod, claim, podGroupClaims) {
		return fmt.Errorf("%w: %s is not reserved for pod %s/%s (UID %s)", ErrNoDevice, what, pod.Namespace, pod.Name, pod.UID)
	}
	return nil
}

func reservedPods(claim *resourceapi.ResourceClaim) []string {
	var pods []string
	for _, ref := range claim.Status.ReservedFor {
		if ref.APIGroup == "" && ref.Resource == "pods" {
			pods = append(pods, ref.Name)
		}
	}
	return pods
}

func (r *resolver) noDevice(claim *resourceapi.ResourceClaim) error {
	var have []string
	for _, res := range claim.Status.Allocation.Devices.Results {
		have = append(have, fmt.Sprintf("request %s: %s/%s/%s", res.Request, res.Driver, res.Pool, res.Device))
	}
	want := ""
	if r.query.Request != "" {
		want += " of request " + r.query.Request
	}
	if r.query.ResourceName != "" {
		want += " with " + AttrResourceName + "=" + r.query.ResourceName
	}
	return fmt.Errorf("%w: ResourceClaim %s/%s has no allocated device%s (allocated: %s)",
		ErrNoDevice, claim.Namespace, claim.Name, want, listOrNone(have))
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "; ")
}

// device reads the allocated device's attributes from its ResourceSlice and
// returns it when it fits; nil when it is another resource's. A device
// mapped to the query's resource (allocated for the pod's request of it as
// an extended resource) fits whatever its resourceName attribute says; it
// keeps that resource, by whose name its driver wrote its DP file.
func (r *resolver) device(ctx context.Context, c Claim, mapped bool) (*Device, error) {
	attrs, err := r.attributes(ctx, c)
	if errors.Is(err, ErrNoDevice) && r.query.PodClaim == "" {
		return nil, nil // not published on this node: not a device of the resource here
	}
	if err != nil {
		return nil, err
	}
	res := stringAttr(attrs, AttrResourceName)
	switch {
	case mapped && res == "":
		res = r.query.ResourceName
	case mapped:
	case r.query.ResourceName != "" && res != "" && res != r.query.ResourceName:
		return nil, nil
	case res == "" && r.query.PodClaim == "":
		return nil, nil // resourceName alone matches devices by the attribute only
	case res == "":
		if res = r.query.ResourceName; res == "" {
			return nil, fmt.Errorf("%w: %s has no attribute %s in its ResourceSlice: devplumb needs the resource name "+
				"to find its device-info file; set \"resourceName\" or have the driver publish the attribute", ErrNoDevice, c, AttrResourceName)
		}
	}
	id := stringAttr(attrs, AttrDeviceID)
	if id == "" {
		var ok bool
		if id, ok = cdiDeviceID(localCDIDevices(r.query.Local, c), res); !ok {
			return nil, fmt.Errorf("%w: %s has no attribute %s in its ResourceSlice, and the kubelet reports no CDI device %s=<ID> for it",
				ErrNoDevice, c, AttrDeviceID, res)
		}
	}
	if c.ShareID != "" {
		id = netshare.DeviceID(id, c.ShareID)
	}
	return &Device{ResourceName: res, ID: id, Claim: c}, nil
}

// attributes are the device's attributes in its pool's newest ResourceSlice
// on the pod's node.
func (r *resolver) attributes(ctx context.Context, c Claim) (map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, error) {
	node := r.pod.Spec.NodeName
	list, ok := r.slices[c.Driver]
	if !ok {
		var err error
		if list, err = r.api.ResourceSlices(ctx, node, c.Driver); err != nil {
			return nil, fmt.Errorf("list ResourceSlices of driver %s on node %s: %w", c.Driver, node, err)
		}
		r.slices[c.Driver] = list
	}
	var found *resourceapi.Device
	gen := int64(-1)
	for i := range list {
		s := &list[i]
		if s.Spec.Pool.Name != c.Pool || s.Spec.Pool.Generation < gen {
			continue
		}
		if j := slices.IndexFunc(s.Spec.Devices, func(d resourceapi.Device) bool { return d.Name == c.Device }); j >= 0 {
			found, gen = &s.Spec.Devices[j], s.Spec.Pool.Generation
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %s is in no ResourceSlice of driver %s on node %s", ErrNoDevice, c, c.Driver, node)
	}
	return found.Attributes, nil
}

func stringAttr(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, name string) string {
	if a, ok := attrs[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}
