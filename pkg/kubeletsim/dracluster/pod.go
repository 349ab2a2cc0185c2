package dracluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// containerImage is what a created Pod's containers name: nothing runs them.
const containerImage = "registry.k8s.io/pause:3.10"

// ensurePod returns the Pod object, created on this node if absent. An
// existing one is authoritative: what the caller said must agree with it.
func (c *Cluster) ensurePod(ctx context.Context, p Pod) (*corev1.Pod, bool, error) {
	pods := c.client.CoreV1().Pods(p.Namespace)
	pod, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if len(p.Containers) == 0 {
			return nil, false, fmt.Errorf("%w: Pod %s/%s is not in the API server and a new one needs a container", ErrInvalid, p.Namespace, p.Name)
		}
		pod, err = pods.Create(ctx, c.newPod(p), metav1.CreateOptions{})
		if apierrors.IsInvalid(err) {
			return nil, false, fmt.Errorf("%w: create Pod %s/%s in the API server: %w", ErrInvalid, p.Namespace, p.Name, err)
		}
		if err != nil {
			return nil, false, wrap(err, "create Pod %s/%s in the API server", p.Namespace, p.Name)
		}
		c.log.Info("Created Pod object", "pod", p.Namespace+"/"+p.Name, "uid", pod.UID, "node", c.node)
		return pod, true, nil
	}
	if err != nil {
		return nil, false, wrap(err, "get Pod %s/%s", p.Namespace, p.Name)
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != c.node {
		return nil, false, fmt.Errorf("%w: Pod %s/%s in the API server is on node %q, not on this node %q",
			ErrInvalid, p.Namespace, p.Name, pod.Spec.NodeName, c.node)
	}
	if pod.DeletionTimestamp != nil {
		return nil, false, fmt.Errorf("%w: Pod %s/%s in the API server is being deleted", ErrInvalid, p.Namespace, p.Name)
	}
	if err := agree(p, pod); err != nil {
		return nil, false, fmt.Errorf("%w: Pod %s/%s in the API server: %w", ErrInvalid, p.Namespace, p.Name, err)
	}
	if pod.Spec.NodeName == "" {
		return c.bind(ctx, pod)
	}
	return pod, false, nil
}

// bind puts an unscheduled pod on this node, as the scheduler does.
func (c *Cluster) bind(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, bool, error) {
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
		Target: corev1.ObjectReference{Kind: "Node", Name: c.node}}
	if err := c.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return nil, false, wrap(err, "bind Pod %s/%s to node %s", pod.Namespace, pod.Name, c.node)
	}
	out, err := c.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return nil, false, wrap(err, "get Pod %s/%s", pod.Namespace, pod.Name)
	}
	return out, false, nil
}

func (c *Cluster) newPod(p Pod) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		Spec:       corev1.PodSpec{NodeName: c.node},
	}
	for _, pc := range p.Claims {
		rc := corev1.PodResourceClaim{Name: pc.Name}
		if pc.ResourceClaimName != "" {
			rc.ResourceClaimName = ptr.To(pc.ResourceClaimName)
		} else {
			rc.ResourceClaimTemplateName = ptr.To(pc.ResourceClaimTemplateName)
		}
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, rc)
	}
	for _, ctr := range p.Containers {
		cc := corev1.Container{Name: ctr.Name, Image: containerImage, ImagePullPolicy: corev1.PullIfNotPresent}
		for _, ref := range ctr.Claims {
			name, request, _ := strings.Cut(ref, "/")
			cc.Resources.Claims = append(cc.Resources.Claims, corev1.ResourceClaim{Name: name, Request: request})
		}
		for res, n := range ctr.Requests {
			q := *resource.NewQuantity(n, resource.DecimalSI)
			if cc.Resources.Limits == nil {
				cc.Resources.Limits, cc.Resources.Requests = corev1.ResourceList{}, corev1.ResourceList{}
			}
			cc.Resources.Limits[corev1.ResourceName(res)], cc.Resources.Requests[corev1.ResourceName(res)] = q, q
		}
		switch {
		case ctr.Init && ctr.Sidecar:
			cc.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
			fallthrough
		case ctr.Init:
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, cc)
		default:
			pod.Spec.Containers = append(pod.Spec.Containers, cc)
		}
	}
	return pod
}

// agree checks that what the caller said of the pod is what the Pod object
// says; what the caller left out (no claims, a container's claims) is taken
// from the object by specOf.
func agree(p Pod, pod *corev1.Pod) error {
	have, ctrs := specOf(pod)
	if len(p.Claims) > 0 && !slices.Equal(p.Claims, have) {
		return fmt.Errorf("its resourceClaims %s differ from the claims given (%s)", claimsString(have), claimsString(p.Claims))
	}
	for _, want := range p.Containers {
		i := slices.IndexFunc(ctrs, func(c Container) bool { return c.Name == want.Name })
		if i < 0 {
			return fmt.Errorf("it has no container %q", want.Name)
		}
		if len(want.Claims) > 0 && !slices.Equal(want.Claims, ctrs[i].Claims) {
			return fmt.Errorf("its container %q references claims %q, not %q", want.Name, ctrs[i].Claims, want.Claims)
		}
	}
	return nil
}

// specOf reads the pod's claims and its containers (init containers
// first): their claim references and extended resource requests.
func specOf(pod *corev1.Pod) ([]PodClaim, []Container) {
	var claims []PodClaim
	for _, rc := range pod.Spec.ResourceClaims {
		claims = append(claims, PodClaim{Name: rc.Name, ResourceClaimName: ptr.Deref(rc.ResourceClaimName, ""),
			ResourceClaimTemplateName: ptr.Deref(rc.ResourceClaimTemplateName, "")})
	}
	var ctrs []Container
	for i, c := range allContainers(pod) {
		ctr := Container{Name: c.Name, Init: i < len(pod.Spec.InitContainers),
			Sidecar: ptr.Deref(c.RestartPolicy, "") == corev1.ContainerRestartPolicyAlways}
		for _, rc := range c.Resources.Claims {
			ref := rc.Name
			if rc.Request != "" {
				ref += "/" + rc.Request
			}
			ctr.Claims = append(ctr.Claims, ref)
		}
		for name, q := range c.Resources.Requests {
			if n, ok := q.AsInt64(); ok && strings.Contains(string(name), "/") {
				if ctr.Requests == nil {
					ctr.Requests = map[string]int64{}
				}
				ctr.Requests[string(name)] = n
			}
		}
		ctrs = append(ctrs, ctr)
	}
	return claims, ctrs
}

func claimsString(cs []PodClaim) string {
	s := "["
	for i, c := range cs {
		if i > 0 {
			s += " "
		}
		if c.ResourceClaimName != "" {
			s += c.Name + "=claim:" + c.ResourceClaimName
		} else {
			s += c.Name + "=template:" + c.ResourceClaimTemplateName
		}
	}
	return s + "]"
}

// deletePod deletes the Pod object at once, only if it is still the one with uid.
func (c *Cluster) deletePod(ctx context.Context, namespace, name, uid string) error {
	err := c.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID(uid))}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return wrap(err, "delete Pod %s/%s", namespace, name)
	}
	return nil
}

// RegisterNode creates the Node object if it is absent, as a kubelet
// registers its node: DRA drivers publish their ResourceSlices with the Node
// as owner and look its UID up.
func (c *Cluster) RegisterNode(ctx context.Context) error {
	_, err := c.client.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return wrap(err, "get Node %s", c.node)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.node,
		Labels: map[string]string{corev1.LabelHostname: c.node}}}
	_, err = c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return wrap(err, "register Node %s", c.node)
	}
	c.log.Info("Registered Node object", "node", c.node)
	return nil
}
