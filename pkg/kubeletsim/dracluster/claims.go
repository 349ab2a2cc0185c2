package dracluster

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/utils/ptr"
)

// podGroupClaims is false: claims made for a pod's PodGroup (the alpha
// DRAWorkloadResourceClaims gate, off by default through 1.37) are not
// supported, so only the pod's own claims and reservations count.
const podGroupClaims = false

// PodClaimAnnotation ties a generated claim to its pod claim (the resourceclaim
// controller's annotation).
const PodClaimAnnotation = "resource.kubernetes.io/pod-claim-name"

// resolveClaims finds or makes the claim of every pod claim, as the
// resourceclaim controller does, and records generated ones in the pod's
// status.resourceClaimStatuses. It returns what it has even on error.
func (c *Cluster) resolveClaims(ctx context.Context, pod *corev1.Pod) ([]Claim, error) {
	var out []Claim
	statuses := slices.Clone(pod.Status.ResourceClaimStatuses)
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		cl, err := c.resolveClaim(ctx, pod, pc)
		if err != nil {
			return out, fmt.Errorf("pod claim %q: %w", pc.Name, err)
		}
		out = append(out, cl)
		if cl.OwnedByPod && !slices.ContainsFunc(statuses, func(s corev1.PodResourceClaimStatus) bool { return s.Name == pc.Name }) {
			statuses = append(statuses, corev1.PodResourceClaimStatus{Name: pc.Name, ResourceClaimName: ptr.To(cl.Object.Name)})
		}
	}
	if !resourceclaim.PodStatusEqual(statuses, pod.Status.ResourceClaimStatuses) {
		if err := c.setClaimStatuses(ctx, pod, statuses); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (c *Cluster) resolveClaim(ctx context.Context, pod *corev1.Pod, pc *corev1.PodResourceClaim) (Claim, error) {
	name, mustCheckOwner, err := resourceclaim.Name(pod, pc)
	switch {
	case errors.Is(err, resourceclaim.ErrClaimNotFound):
		return c.generateClaim(ctx, pod, pc) // no status entry yet: the controller's job
	case err != nil:
		return Claim{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	case name == nil:
		return Claim{}, fmt.Errorf("%w: the pod's status says it needs no claim for it", ErrInvalid)
	}
	claim, err := c.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && mustCheckOwner {
		return c.generateClaim(ctx, pod, pc) // recorded but deleted: made again, as the controller does
	}
	if apierrors.IsNotFound(err) {
		return Claim{}, fmt.Errorf("%w: ResourceClaim %s/%s not found", ErrInvalid, pod.Namespace, *name)
	}
	if err != nil {
		return Claim{}, wrap(err, "get ResourceClaim %s/%s", pod.Namespace, *name)
	}
	if mustCheckOwner {
		if err := resourceclaim.IsForPod(pod, claim, podGroupClaims); err != nil {
			return Claim{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return Claim{PodClaim: pc.Name, Object: claim, OwnedByPod: mustCheckOwner}, nil
}

// generateClaim makes the claim of a template-based pod claim exactly as the
// resourceclaim controller does, reusing one it made before for this pod.
func (c *Cluster) generateClaim(ctx context.Context, pod *corev1.Pod, pc *corev1.PodResourceClaim) (Claim, error) {
	if existing, err := c.findGenerated(ctx, pod, pc.Name); err != nil || existing != nil {
		return Claim{PodClaim: pc.Name, Object: existing, OwnedByPod: true}, err
	}
	tname := ptr.Deref(pc.ResourceClaimTemplateName, "")
	tmpl, err := c.client.ResourceV1().ResourceClaimTemplates(pod.Namespace).Get(ctx, tname, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Claim{}, fmt.Errorf("%w: ResourceClaimTemplate %s/%s not found", ErrInvalid, pod.Namespace, tname)
	}
	if err != nil {
		return Claim{}, wrap(err, "get ResourceClaimTemplate %s/%s", pod.Namespace, tname)
	}
	claim := claimFromTemplate(pod, pc.Name, tmpl)
	claim, err = c.client.ResourceV1().ResourceClaims(pod.Namespace).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return Claim{}, wrap(err, "create ResourceClaim from template %s/%s", pod.Namespace, tname)
	}
	c.log.Info("Created ResourceClaim from template", "claim", pod.Namespace+"/"+claim.Name, "template", tname, "pod", pod.Name)
	return Claim{PodClaim: pc.Name, Object: claim, OwnedByPod: true}, nil
}

func claimFromTemplate(pod *corev1.Pod, podClaim string, tmpl *resourceapi.ResourceClaimTemplate) *resourceapi.ResourceClaim {
	annotations := map[string]string{}
	for k, v := range tmpl.Spec.ObjectMeta.Annotations {
		annotations[k] = v
	}
	annotations[PodClaimAnnotation] = podClaim
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: generateName(pod.Name, podClaim),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			Annotations: annotations,
			Labels:      tmpl.Spec.ObjectMeta.Labels,
		},
		Spec: tmpl.Spec.Spec,
	}
}

// generateName is the controller's <pod>-<podclaim>-, both parts cut in
// proportion when too long for a 63-character name with 5 random characters.
func generateName(pod, podClaim string) string {
	name := pod + "-" + podClaim + "-"
	const maxBaseLen = 57
	if len(name) > maxBaseLen {
		name = pod[:len(pod)*maxBaseLen/len(name)] + "-" + podClaim[:len(podClaim)*maxBaseLen/len(name)]
	}
	return name
}

// findGenerated returns a claim this pod owns for podClaim (made by an earlier
// attempt that did not get as far as the pod status), or nil.
func (c *Cluster) findGenerated(ctx context.Context, pod *corev1.Pod, podClaim string) (*resourceapi.ResourceClaim, error) {
	list, err := c.client.ResourceV1().ResourceClaims(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, wrap(err, "list ResourceClaims in %s", pod.Namespace)
	}
	for i := range list.Items {
		cl := &list.Items[i]
		if cl.Annotations[PodClaimAnnotation] == podClaim && resourceclaim.IsForPod(pod, cl, podGroupClaims) == nil {
			return cl, nil
		}
	}
	return nil, nil
}

// setClaimStatuses writes pod.status.resourceClaimStatuses.
func (c *Cluster) setClaimStatuses(ctx context.Context, pod *corev1.Pod, statuses []corev1.PodResourceClaimStatus) error {
	return c.updatePodStatus(ctx, pod, "status.resourceClaimStatuses", func(st *corev1.PodStatus) { st.ResourceClaimStatuses = statuses })
}

// updatePodStatus sets a field of the pod's status, retrying on conflict
// with the latest pod.
func (c *Cluster) updatePodStatus(ctx context.Context, pod *corev1.Pod, field string, set func(*corev1.PodStatus)) error {
	pods := c.client.CoreV1().Pods(pod.Namespace)
	cur := pod.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		set(&cur.Status)
		_, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if fresh, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{}); gerr == nil {
				cur = fresh
			}
		}
		return err
	})
	if err != nil {
		return wrap(err, "set %s of Pod %s/%s", field, pod.Namespace, pod.Name)
	}
	return nil
}

// deleteClaim deletes a generated claim if it is still the one with the UID.
func (c *Cluster) deleteClaim(ctx context.Context, cl ClaimRef) error {
	err := c.client.ResourceV1().ResourceClaims(cl.Namespace).Delete(ctx, cl.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID(cl.UID))}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return wrap(err, "delete ResourceClaim %s/%s", cl.Namespace, cl.Name)
	}
	return nil
}
