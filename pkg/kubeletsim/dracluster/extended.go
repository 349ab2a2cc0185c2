package dracluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Extended resources backed by DRA (KEP-5004), as the 1.37 scheduler's
// dynamicresources plugin does them (extendeddynamicresources.go): a pod's
// container asking resources.limits {R: n}, on a node with no allocatable R
// (no device plugin serves it), while a DeviceClass maps R (its
// spec.extendedResourceName, or the implicit
// deviceclass.resource.kubernetes.io/<class>), gets its devices from one
// claim the scheduler makes for all such requests of the pod:
//   - generateName <pod>-extended-resources-, annotation
//     resource.kubernetes.io/extended-resource-claim: "true", the pod its
//     controlling owner (no blockOwnerDeletion);
//   - one ExactCount request per container and resource, named
//     container-<i>-request-<j>: i indexes init containers then containers,
//     j is R's index among the container's requested resource names,
//     sorted; a non-restartable init container reuses the requests of the
//     containers after it, else it gets its own (the largest one serves all
//     of them);
//   - allocated with the pod's other claims, then pod
//     status.extendedResourceClaimStatus maps each (container, R) to its
//     request names.

// inMemoryName is the scheduler's name of the claim before it is created
// (not a valid object name).
const inMemoryName = "<extended-resources>"

// ExtendedResourceClaimAnnotation marks the claim the scheduler made.
const ExtendedResourceClaimAnnotation = resourceapi.ExtendedResourceClaimAnnotation

// classResolver answers, from the cluster's DeviceClasses, which class
// serves an extended resource name, with the scheduler's own cache (newest
// class first on a clash, the name as tie-breaker).
func (c *Cluster) classResolver(ctx context.Context) (*extendedresourcecache.ExtendedResourceCache, error) {
	classes, err := c.client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, wrap(err, "list DeviceClasses")
	}
	cache := extendedresourcecache.NewExtendedResourceCache(klog.FromContext(ctx))
	for i := range classes.Items {
		cache.OnAdd(&classes.Items[i], true)
	}
	return cache, nil
}

// ExtendedResources says which of the resource names a DeviceClass serves:
// those a pod may get from DRA on a node with none of them allocatable.
func (c *Cluster) ExtendedResources(ctx context.Context, names []string) ([]string, error) {
	cache, err := c.classResolver(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if cache.GetDeviceClass(corev1.ResourceName(n)) != nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// extendedClaim is the claim the scheduler would make for the pod's
// extended resources that DRA serves on this node (none allocatable), not
// yet created, with its request mappings; nil when there are none.
func (c *Cluster) extendedClaim(ctx context.Context, pod *corev1.Pod, allocatable map[string]int) (*Claim, []corev1.ContainerExtendedResourceRequest, error) {
	cache, err := c.classResolver(ctx)
	if err != nil {
		return nil, nil, err
	}
	classes := map[string]string{}
	for _, ctr := range allContainers(pod) {
		for name, q := range ctr.Resources.Requests {
			if class := cache.GetDeviceClass(name); class != nil && !q.IsZero() && allocatable[string(name)] == 0 {
				classes[string(name)] = class.Name
			}
		}
	}
	if len(classes) == 0 {
		return nil, nil, nil
	}
	if err := c.deleteStaleExtendedClaims(ctx, pod); err != nil {
		return nil, nil, err
	}
	reqs, mappings := requestsAndMappings(pod, classes)
	claim := &resourceapi.ResourceClaim{
		// In memory until created, with a name and UID no created claim has,
		// as the scheduler keeps it.
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: inMemoryName, UID: types.UID(pod.UID + "-extended-resources"),
			GenerateName:    pod.Name + "-extended-resources-",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}},
			Annotations:     map[string]string{ExtendedResourceClaimAnnotation: "true"}},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
	return &Claim{Object: claim, OwnedByPod: true, Extended: true}, mappings, nil
}

// allContainers are the pod's init containers, then its containers: the
// order the scheduler's request names count in.
func allContainers(pod *corev1.Pod) []corev1.Container {
	return append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...)
}

// requestsAndMappings is the scheduler's createRequestsAndMappings for the
// DRA-served resources (name -> class): the claim's requests sorted by name,
// and the (container, resource) -> request mappings, per resource in name
// order, long-lived containers first.
func requestsAndMappings(pod *corev1.Pod, classes map[string]string) ([]resourceapi.DeviceRequest, []corev1.ContainerExtendedResourceRequest) {
	ctrs := allContainers(pod)
	nInit := len(pod.Spec.InitContainers)
	var reqs []resourceapi.DeviceRequest
	var mappings []corev1.ContainerExtendedResourceRequest
	for _, res := range slices.Sorted(maps.Keys(classes)) {
		long := make([]*resourceapi.DeviceRequest, len(ctrs))
		var longMaps, shortMaps []corev1.ContainerExtendedResourceRequest
		for i := range ctrs {
			if !shortLived(ctrs[i], i, nInit) {
				var m []corev1.ContainerExtendedResourceRequest
				long[i], m = containerRequest(i, &ctrs[i], res, classes[res], nil)
				longMaps = append(longMaps, m...)
			}
		}
		var maxShort *resourceapi.DeviceRequest
		shortNames := map[string]bool{}
		for i := range ctrs {
			if !shortLived(ctrs[i], i, nInit) {
				continue
			}
			r, m := containerRequest(i, &ctrs[i], res, classes[res], long[i:])
			if r != nil {
				shortNames[r.Name] = true
				if maxShort == nil || maxShort.Exactly.Count < r.Exactly.Count {
					maxShort = r
				}
			}
			shortMaps = append(shortMaps, m...)
		}
		for i := range shortMaps {
			if shortNames[shortMaps[i].RequestName] {
				shortMaps[i].RequestName = maxShort.Name // one request serves the init containers one after another
			}
		}
		if maxShort != nil {
			reqs = append(reqs, *maxShort)
		}
		for _, r := range long {
			if r != nil {
				reqs = append(reqs, *r)
			}
		}
		mappings = append(append(mappings, longMaps...), shortMaps...)
	}
	slices.SortFunc(reqs, func(a, b resourceapi.DeviceRequest) int { return strings.Compare(a.Name, b.Name) })
	return reqs, mappings
}

// shortLived: an init container that is not a sidecar runs to completion
// before the containers start.
func shortLived(c corev1.Container, i, nInit int) bool {
	return i < nInit && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways)
}

// containerRequest is the scheduler's createResourceRequestAndMappings: the
// container's own request of res, if the reusable requests (of containers
// that run after it) do not cover its count, and its mappings.
func containerRequest(i int, c *corev1.Container, res, class string, reusable []*resourceapi.DeviceRequest) (*resourceapi.DeviceRequest, []corev1.ContainerExtendedResourceRequest) {
	q, ok := c.Resources.Requests[corev1.ResourceName(res)]
	count, exact := q.AsInt64()
	if !ok || !exact || count == 0 {
		return nil, nil
	}
	var mappings []corev1.ContainerExtendedResourceRequest
	sum := int64(0)
	for _, r := range reusable {
		if r == nil {
			continue
		}
		sum += r.Exactly.Count
		mappings = append(mappings, corev1.ContainerExtendedResourceRequest{ContainerName: c.Name, ResourceName: res, RequestName: r.Name})
		if sum >= count {
			return nil, mappings
		}
	}
	var names []string
	for n := range c.Resources.Requests {
		names = append(names, string(n))
	}
	slices.Sort(names)
	name := fmt.Sprintf("container-%d-request-%d", i, slices.Index(names, res))
	req := &resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count - sum}}
	return req, append(mappings, corev1.ContainerExtendedResourceRequest{ContainerName: c.Name, ResourceName: res, RequestName: name})
}

// deleteStaleExtendedClaims deletes claims an earlier attempt made for the
// pod's extended resources, as the scheduler deletes a stale one and
// starts anew.
func (c *Cluster) deleteStaleExtendedClaims(ctx context.Context, pod *corev1.Pod) error {
	list, err := c.client.ResourceV1().ResourceClaims(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return wrap(err, "list ResourceClaims in %s", pod.Namespace)
	}
	for _, cl := range list.Items {
		if cl.Annotations[ExtendedResourceClaimAnnotation] != "true" || !ownedBy(&cl, pod) {
			continue
		}
		ref := ClaimRef{Namespace: cl.Namespace, Name: cl.Name, UID: string(cl.UID), OwnedByPod: true}
		if err := c.unreserve(ctx, ref, string(pod.UID)); err != nil {
			return err
		}
		if err := c.deleteClaim(ctx, ref); err != nil {
			return err
		}
	}
	return nil
}

func ownedBy(cl *resourceapi.ResourceClaim, pod *corev1.Pod) bool {
	return slices.ContainsFunc(cl.OwnerReferences, func(o metav1.OwnerReference) bool {
		return o.UID == pod.UID && ptr.Deref(o.Controller, false)
	})
}

// createExtendedClaim creates the claim the scheduler made in memory, as
// its PreBind does, before the allocation is written.
func (c *Cluster) createExtendedClaim(ctx context.Context, cl *Claim) error {
	o := cl.Object.DeepCopy()
	o.Name, o.UID = "", ""
	created, err := c.client.ResourceV1().ResourceClaims(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	if err != nil {
		return wrap(err, "create the ResourceClaim for extended resources of pod %s/%s", o.Namespace, o.OwnerReferences[0].Name)
	}
	c.log.Info("Created ResourceClaim for extended resources", "claim", o.Namespace+"/"+created.Name, "pod", o.OwnerReferences[0].Name)
	cl.Object = created
	return nil
}
