package bench

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/cni/dradevice"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// The DRA driver the bench plays (P6): its name, its DeviceClass, and the pod-spec
// claim name and template of every P6 pod.
const (
	draDriver   = "net.bench.example.com"
	draClass    = "bench-net"
	draPodClaim = "net"
	draTemplate = "bench-net"
)

// draDevice is one device of the bench driver's ResourceSlice: its name there and the
// device ID its k8s.cni.cncf.io/deviceID attribute (and its CDI device) carries.
type draDevice struct{ name, id string }

// draPublish creates what a DRA driver publishes for the node: the DeviceClass of its
// devices and one ResourceSlice (pool: the node) holding devs, each with the two
// k8s.cni.cncf.io attributes; and each device's device-info file, as its
// NodePrepareResources would write it.
func (e *env) draPublish(ctx context.Context, devs []draDevice) error {
	c := e.cfg.kube.srv.Client.ResourceV1()
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: draClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: `device.driver == "` + draDriver + `"`}}}}}
	if _, err := c.DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create DeviceClass %s: %w", draClass, err)
	}
	node := kubeNodeName
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + draClass},
		Spec: resourcev1.ResourceSliceSpec{Driver: draDriver, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}
	for _, d := range devs {
		id, res := d.id, Resource
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d.name,
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				dradevice.AttrDeviceID: {StringValue: &id}, dradevice.AttrResourceName: {StringValue: &res}}})
		if err := e.pods.files.WriteDP(Resource, d.id, pciInfo(0xff00+len(s.Spec.Devices))); err != nil {
			return fmt.Errorf("device-info of %s: %w", d.id, err)
		}
	}
	if _, err := c.ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ResourceSlice %s: %w", s.Name, err)
	}
	return nil
}

// draPod creates pod with a claim made from a template and allocated dev, as the
// ResourceClaim controller, the scheduler and the kubelet leave it when the pod's sandbox
// is set up: the pod's spec.resourceClaims names the template and its
// status.resourceClaimStatuses the claim; the claim, owned by the pod, holds the device in
// status.allocation and the pod in reservedFor. The node's PodResources server reports
// the claim with the device's CDI device when reported is set, else the pod alone (a
// network-only claim no container references).
func (e *env) draPod(ctx context.Context, pod string, dev draDevice, reported bool) error {
	k := e.cfg.kube
	claimName := pod + "-" + draPodClaim
	tmpl := draTemplate
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: pod},
		Spec: corev1.PodSpec{NodeName: kubeNodeName,
			ResourceClaims: []corev1.PodResourceClaim{{Name: draPodClaim, ResourceClaimTemplateName: &tmpl}},
			Containers:     []corev1.Container{{Name: "main", Image: "busybox", ImagePullPolicy: corev1.PullNever}}}}
	pods := k.srv.Client.CoreV1().Pods(podNS)
	p, err := pods.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod %s: %w", pod, err)
	}
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: draPodClaim, ResourceClaimName: &claimName}}
	if p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of pod %s: %w", pod, err)
	}
	if err := k.draClaim(ctx, p, claimName, dev); err != nil {
		return err
	}
	e.reportPod(p, claimName, dev, reported)
	return nil
}

// draClaim creates the claim of pod's template claim, allocated dev and reserved for pod.
func (k *kubeNode) draClaim(ctx context.Context, pod *corev1.Pod, name string, dev draDevice) error {
	return k.allocatedClaim(ctx, pod, name, draPodClaim, nil, dev)
}

// allocatedClaim creates claim name owned by pod with one request, allocated dev for it
// and reserved for pod.
func (k *kubeNode) allocatedClaim(ctx context.Context, pod *corev1.Pod, name, request string, annotations map[string]string, dev draDevice) error {
	yes := true
	rc := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: name, Annotations: annotations,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: &yes}}},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: request,
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}}
	claims := k.srv.Client.ResourceV1().ResourceClaims(podNS)
	rc, err := claims.Create(ctx, rc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create ResourceClaim %s: %w", name, err)
	}
	rc.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: request, Driver: draDriver, Pool: kubeNodeName, Device: dev.name}}}}
	rc.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	if _, err := claims.UpdateStatus(ctx, rc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("allocate ResourceClaim %s: %w", name, err)
	}
	return nil
}

// extendedRequest is the request the scheduler names for the first container's first
// extended resource backed by DRA.
const extendedRequest = "container-0-request-0"

// draExtendedPod creates pod asking resources.limits {Resource: 1} as the 1.37 scheduler
// leaves it when a DeviceClass serves Resource as an extended resource (KEP-5004): its claim
// (annotated, the pod its controller, request container-0-request-0) allocated dev and
// reserved, and the pod's status.extendedResourceClaimStatus mapping the container's
// resource to the request. The PodResources server reports the claim when reported is set.
// The claim is named as the template claims are here (the scheduler generates a name; devplumb
// reads it from the status).
func (e *env) draExtendedPod(ctx context.Context, pod string, dev draDevice, reported bool) error {
	k := e.cfg.kube
	claimName := pod + "-" + draPodClaim
	one := resource.MustParse("1")
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: pod},
		Spec: corev1.PodSpec{NodeName: kubeNodeName, Containers: []corev1.Container{{Name: "main", Image: "busybox",
			ImagePullPolicy: corev1.PullNever, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{Resource: one}}}}}}
	pods := k.srv.Client.CoreV1().Pods(podNS)
	p, err := pods.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod %s: %w", pod, err)
	}
	p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: claimName,
		RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "main", ResourceName: Resource, RequestName: extendedRequest}}}
	if p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of pod %s: %w", pod, err)
	}
	ann := map[string]string{resourcev1.ExtendedResourceClaimAnnotation: "true"}
	if err := k.allocatedClaim(ctx, p, claimName, extendedRequest, ann, dev); err != nil {
		return err
	}
	e.reportPod(p, claimName, dev, reported)
	return nil
}

// reportPod records pod's UID and what the kubelet's PodResources says of it: the claim
// with the device's CDI device when reported is set, else the pod alone.
func (e *env) reportPod(p *corev1.Pod, claimName string, dev draDevice, reported bool) {
	k := e.cfg.kube
	k.mu.Lock()
	k.uid[p.Name] = string(p.UID)
	k.mu.Unlock()
	kubelet := &v1.PodResources{Namespace: podNS, Name: p.Name, Containers: []*v1.ContainerResources{{Name: "main"}}}
	if reported {
		kubelet.Containers[0].DynamicResources = []*v1.DynamicResource{podresourcestest.Claim(podNS, claimName,
			podresourcestest.Device(draDriver, kubeNodeName, dev.name, Resource+"="+dev.id))}
	}
	e.pods.put(kubelet)
}

// draDeviceStatus is the claim's status.devices[] entry devplumb wrote for pod's device
// (nil when there is none): P6 checks that each ADD wrote it and each DEL removed it.
func (k *kubeNode) draDeviceStatus(pod string) (*resourcev1.AllocatedDeviceStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := k.srv.Client.ResourceV1().ResourceClaims(podNS).Get(ctx, pod+"-"+draPodClaim, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for i := range rc.Status.Devices {
		if rc.Status.Devices[i].NetworkData != nil {
			return &rc.Status.Devices[i], nil
		}
	}
	return nil, nil
}
