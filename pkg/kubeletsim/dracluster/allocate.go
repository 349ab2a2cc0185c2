package dracluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Features are the GA allocator features the 1.37 scheduler always has on
// (DRAAdminAccess, DRAPrioritizedList, DRADeviceTaints); device status is GA
// and no longer an allocator feature.
var Features = structured.Features{AdminAccess: true, PrioritizedList: true, DeviceTaints: true}

// celCacheSize is the scheduler's CEL cache size.
const celCacheSize = 10

// allocateAndReserve allocates the claims that have no allocation (all in one
// allocator call, so they get distinct devices) and reserves every claim for
// the pod, writing each as the scheduler's bindClaim does.
func (c *Cluster) allocateAndReserve(ctx context.Context, pod *corev1.Pod, claims []Claim) error {
	node, err := c.nodeObject(ctx)
	if err != nil {
		return err
	}
	var todo []*resourceapi.ResourceClaim
	for _, cl := range claims {
		if cl.Object.DeletionTimestamp != nil {
			return fmt.Errorf("%w: ResourceClaim %s/%s is being deleted", ErrInvalid, cl.Object.Namespace, cl.Object.Name)
		}
		if cl.Object.Status.Allocation == nil {
			todo = append(todo, cl.Object)
		} else if err := fitsNode(cl.Object, node); err != nil {
			return err
		}
	}
	results, err := c.allocate(ctx, node, todo)
	if err != nil {
		return err
	}
	for i := range claims {
		var alloc *resourceapi.AllocationResult
		if j := slices.Index(todo, claims[i].Object); j >= 0 {
			alloc = &results[j]
		}
		if claims[i].Extended {
			if err := c.createExtendedClaim(ctx, &claims[i]); err != nil {
				return err
			}
		}
		if err := c.bindClaim(ctx, pod, &claims[i], alloc); err != nil {
			return err
		}
	}
	return nil
}

// nodeObject is the Node from the API server; nodesim needs none there, so a
// missing one is a bare node of that name (slices name their node directly).
func (c *Cluster) nodeObject(ctx context.Context) (*corev1.Node, error) {
	node, err := c.client.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.node}}, nil
	}
	if err != nil {
		return nil, wrap(err, "get Node %s", c.node)
	}
	return node, nil
}

// fitsNode accepts an existing allocation only if this node may use it.
func fitsNode(claim *resourceapi.ResourceClaim, node *corev1.Node) error {
	sel := claim.Status.Allocation.NodeSelector
	if sel == nil {
		return nil
	}
	ns, err := nodeaffinity.NewNodeSelector(sel)
	if err != nil {
		return fmt.Errorf("%w: ResourceClaim %s/%s: allocation node selector: %w", ErrInvalid, claim.Namespace, claim.Name, err)
	}
	if !ns.Match(node) {
		return fmt.Errorf("%w: ResourceClaim %s/%s is allocated for other nodes, not node %s",
			ErrUnschedulable, claim.Namespace, claim.Name, node.Name)
	}
	return nil
}

// allocate runs the scheduler's allocator for claims on node.
func (c *Cluster) allocate(ctx context.Context, node *corev1.Node, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	slices, err := c.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, wrap(err, "list ResourceSlices")
	}
	classes, err := c.client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, wrap(err, "list DeviceClasses")
	}
	taken, err := c.allocatedDevices(ctx)
	if err != nil {
		return nil, err
	}
	alloc, err := structured.NewAllocator(ctx, Features, structured.AllocatedState{AllocatedDevices: taken},
		classLister(classes.Items), pointers(slices.Items), cel.NewCache(celCacheSize, cel.Features{}))
	if err != nil {
		return nil, fmt.Errorf("create allocator: %w", err)
	}
	results, err := alloc.Allocate(ctx, node, claims)
	if err != nil {
		return nil, fmt.Errorf("%w: allocate %s on node %s: %w", ErrInvalid, names(claims), node.Name, err)
	}
	if results == nil {
		return nil, fmt.Errorf("%w: cannot allocate %s on node %s: no free devices in the node's ResourceSlices satisfy their requests",
			ErrUnschedulable, names(claims), node.Name)
	}
	return results, nil
}

// allocatedDevices is every device allocated to a claim in the cluster, admin
// access ones excepted, as the scheduler counts them.
func (c *Cluster) allocatedDevices(ctx context.Context) (sets.Set[structured.DeviceID], error) {
	list, err := c.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, wrap(err, "list ResourceClaims")
	}
	taken := sets.New[structured.DeviceID]()
	for _, cl := range list.Items {
		if cl.Status.Allocation == nil {
			continue
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			if r.AdminAccess == nil || !*r.AdminAccess {
				taken.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
			}
		}
	}
	return taken, nil
}

// bindClaim writes the allocation (finalizer first) and the reservation, as
// the scheduler does, retrying on conflict with the latest claim.
func (c *Cluster) bindClaim(ctx context.Context, pod *corev1.Pod, cl *Claim, alloc *resourceapi.AllocationResult) error {
	claims := c.client.ResourceV1().ResourceClaims(cl.Object.Namespace)
	claim, refresh := cl.Object.DeepCopy(), false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if refresh {
			fresh, err := claims.Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			claim = fresh
		}
		refresh = true
		if resourceclaim.IsReservedForPod(pod, claim, podGroupClaims) {
			return nil
		}
		if alloc != nil {
			if claim.Status.Allocation != nil {
				return fmt.Errorf("%w: claim got allocated elsewhere in the meantime", ErrUnschedulable)
			}
			if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
				claim.Finalizers = append(claim.Finalizers, resourceapi.Finalizer)
				updated, err := claims.Update(ctx, claim, metav1.UpdateOptions{})
				if err != nil {
					return err
				}
				claim = updated
			}
			claim.Status.Allocation = alloc
		}
		claim.Status.ReservedFor = append(claim.Status.ReservedFor,
			resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
		updated, err := claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		claim, cl.reserved = updated, true
		return nil
	})
	if err != nil {
		return wrap(err, "allocate and reserve ResourceClaim %s/%s for pod %s", claim.Namespace, claim.Name, pod.Name)
	}
	cl.Object = claim
	return nil
}

// unreserve removes the pod from the claim's reservedFor and, when no one is
// left, deallocates the claim and drops the finalizer, as the resourceclaim
// controller does.
func (c *Cluster) unreserve(ctx context.Context, ref ClaimRef, podUID string) error {
	claims := c.client.ResourceV1().ResourceClaims(ref.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		claim, err := claims.Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(claim.UID) != ref.UID {
			return nil // replaced: not ours
		}
		valid := slices.DeleteFunc(slices.Clone(claim.Status.ReservedFor), func(r resourceapi.ResourceClaimConsumerReference) bool {
			return r.Resource == "pods" && r.APIGroup == "" && string(r.UID) == podUID
		})
		if len(valid) < len(claim.Status.ReservedFor) {
			claim.Status.ReservedFor = valid
			if len(valid) == 0 && slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
				claim.Status.Allocation = nil
			}
			if claim, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if i := slices.Index(claim.Finalizers, resourceapi.Finalizer); i >= 0 && claim.Status.Allocation == nil {
			claim.Finalizers = slices.Delete(claim.Finalizers, i, i+1)
			_, err = claims.Update(ctx, claim, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return wrap(err, "release ResourceClaim %s/%s", ref.Namespace, ref.Name)
	}
	return nil
}

type classLister []resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return pointers(l), nil }

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for i := range l {
		if l[i].Name == name {
			return &l[i], nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func names(claims []*resourceapi.ResourceClaim) string {
	var s []string
	for _, c := range claims {
		s = append(s, "ResourceClaim "+c.Namespace+"/"+c.Name)
	}
	return strings.Join(s, ", ")
}
