package dracluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// ErrInvalid marks a pod or claim the caller described wrongly, or API objects
// that contradict it (a missing claim or template, a pod on another node).
var ErrInvalid = errors.New("invalid")

// ErrUnschedulable marks claims no device of this node can satisfy.
var ErrUnschedulable = errors.New("unschedulable")

// PodClaim is one entry of pod.spec.resourceClaims: exactly one of
// ResourceClaimName and ResourceClaimTemplateName is set.
type PodClaim struct {
	Name                      string
	ResourceClaimName         string
	ResourceClaimTemplateName string
}

// Container is a container's name, the pod claims it references
// (resources.claims: "PODCLAIM", or "PODCLAIM/REQUEST" for one request of
// it) and its extended resource limits (requests alike).
type Container struct {
	Name     string
	Claims   []string
	Requests map[string]int64
	// Init: an init container (runs before the containers); Sidecar: one
	// that keeps running (restartPolicy Always).
	Init, Sidecar bool
}

// Pod is what nodesim knows of a pod before the API server is asked.
type Pod struct {
	Namespace, Name string
	Claims          []PodClaim
	Containers      []Container
	// Allocatable is the node's device plugin devices per resource name, for
	// the scheduler's choice: a DRA-backed extended resource is served by
	// DRA only where the node has none of it allocatable.
	Allocatable map[string]int
}

// Cluster acts for the control plane of one node.
type Cluster struct {
	client kubernetes.Interface
	node   string
	log    *slog.Logger
}

// New acts as the control plane for pods on node through client.
func New(client kubernetes.Interface, node string, log *slog.Logger) *Cluster {
	if log == nil {
		log = slog.Default()
	}
	return &Cluster{client: client, node: node, log: log}
}

// Node is the node name pods are put on.
func (c *Cluster) Node() string { return c.node }

// Claim is one of the pod's claims, allocated and reserved for the pod.
type Claim struct {
	PodClaim string
	Object   *resourceapi.ResourceClaim
	// OwnedByPod: generated from a template for this pod, or by the
	// scheduler for its extended resources; it goes with the pod.
	OwnedByPod bool
	// Extended: the claim the scheduler made for the pod's extended
	// resources backed by DRA (no pod claim; PodClaim is "").
	Extended bool

	reserved bool // this admission added the pod to reservedFor
}

// Admission is the API side of an admitted pod.
type Admission struct {
	UID string
	// Claims and Containers are the pod's as the API server has them (an
	// existing Pod object may add to what the caller gave).
	PodClaims  []PodClaim
	Containers []Container
	// Claims holds the claim of every pod claim that has one, in pod order,
	// and last the claim for extended resources, if the pod has one.
	Claims []Claim
	// Mappings are the pod's status.extendedResourceClaimStatus request
	// mappings: which requests of the extended-resource claim serve each
	// container's extended resource.
	Mappings []corev1.ContainerExtendedResourceRequest

	createdPod bool
}

// Admit makes sure the Pod object exists on this node, its claims exist, are
// allocated and reserved for it. On error everything it did is undone.
func (c *Cluster) Admit(ctx context.Context, p Pod) (*Admission, error) {
	pod, created, err := c.ensurePod(ctx, p)
	if err != nil {
		return nil, err
	}
	adm := &Admission{UID: string(pod.UID), createdPod: created}
	adm.PodClaims, adm.Containers = specOf(pod)
	if err := c.admitClaims(ctx, pod, adm, p.Allocatable); err != nil {
		c.undo(ctx, p.Namespace, p.Name, adm)
		return nil, err
	}
	return adm, nil
}

func (c *Cluster) admitClaims(ctx context.Context, pod *corev1.Pod, adm *Admission, allocatable map[string]int) error {
	claims, err := c.resolveClaims(ctx, pod)
	adm.Claims = claims // even partly: undo deletes what was generated
	if err != nil {
		return err
	}
	ext, mappings, err := c.extendedClaim(ctx, pod, allocatable)
	if err != nil {
		return err
	}
	if ext != nil {
		adm.Claims = append(adm.Claims, *ext)
	}
	if err := c.allocateAndReserve(ctx, pod, adm.Claims); err != nil {
		return err
	}
	if ext == nil {
		return nil
	}
	adm.Mappings = mappings
	ext = &adm.Claims[len(adm.Claims)-1]
	return c.updatePodStatus(ctx, pod, "status.extendedResourceClaimStatus", func(st *corev1.PodStatus) {
		st.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{RequestMappings: mappings, ResourceClaimName: ext.Object.Name}
	})
}

// undo reverts an admission that failed part way (or whose kubelet part did).
func (c *Cluster) undo(ctx context.Context, namespace, name string, adm *Admission) {
	ctx = context.WithoutCancel(ctx) // clean up even when the caller gave up
	var refs []ClaimRef
	for _, cl := range adm.Claims {
		if cl.Object == nil || (!cl.reserved && !cl.OwnedByPod) || cl.Object.Name == inMemoryName {
			continue
		}
		refs = append(refs, ClaimRef{Namespace: cl.Object.Namespace, Name: cl.Object.Name,
			UID: string(cl.Object.UID), OwnedByPod: cl.OwnedByPod})
	}
	if err := c.release(ctx, namespace, name, adm.UID, refs, adm.createdPod); err != nil {
		c.log.Error("Undoing a failed pod admission in the API server left something behind",
			"pod", namespace+"/"+name, "err", err)
	}
}

// Undo reverts a successful Admit whose kubelet part failed.
func (c *Cluster) Undo(ctx context.Context, namespace, name string, adm *Admission) {
	c.undo(ctx, namespace, name, adm)
}

// ClaimRef names a claim a pod holds, for Release.
type ClaimRef struct {
	Namespace, Name, UID string
	OwnedByPod           bool
}

// Release is what happens in the API server when the pod is gone: its
// reservations are removed (a claim no one reserves any more is deallocated,
// as the resourceclaim controller does), its generated claims and the Pod
// object (if it still has uid) are deleted. Objects already gone are fine.
func (c *Cluster) Release(ctx context.Context, namespace, name, uid string, claims []ClaimRef) error {
	return c.release(ctx, namespace, name, uid, claims, true)
}

func (c *Cluster) release(ctx context.Context, namespace, name, uid string, claims []ClaimRef, deletePod bool) error {
	var errs []error
	for _, cl := range claims {
		if err := c.unreserve(ctx, cl, uid); err != nil {
			errs = append(errs, err)
			continue
		}
		if cl.OwnedByPod {
			errs = append(errs, c.deleteClaim(ctx, cl))
		}
	}
	if deletePod && uid != "" {
		errs = append(errs, c.deletePod(ctx, namespace, name, uid))
	}
	return errors.Join(errs...)
}

// wrap names the object in an API error.
func wrap(err error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}

// DeleteSlices deletes the driver's ResourceSlices of this node, as the
// kubelet does after the driver deregistered; driver "" deletes those of
// every driver, as the kubelet does when it starts.
func (c *Cluster) DeleteSlices(ctx context.Context, driver string) error {
	sel, of := fields.Set{resourceapi.ResourceSliceSelectorNodeName: c.node}, "every driver"
	if driver != "" {
		sel[resourceapi.ResourceSliceSelectorDriver], of = driver, "driver "+driver
	}
	err := c.client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return wrap(err, "delete ResourceSlices of %s on node %s", of, c.node)
	}
	return nil
}
