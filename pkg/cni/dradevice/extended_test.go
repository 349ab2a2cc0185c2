package dradevice_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/devplumb/devplumb/pkg/cni/dradevice"
)

// objects answers the API path's reads from a fixed set of objects, as
// the API server would hold them (pkg/cni/kube reads them for real; e2e/dra
// runs both against the real API server).
type objects struct {
	pod    *corev1.Pod
	claims map[string]*resourceapi.ResourceClaim
	slices []resourceapi.ResourceSlice
	asked  []string
}

func (o *objects) Pod(_ context.Context, ns, name, _ string) (*corev1.Pod, error) {
	o.asked = append(o.asked, "pod "+name)
	if o.pod == nil || o.pod.Namespace != ns || o.pod.Name != name {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return o.pod.DeepCopy(), nil
}

func (o *objects) ResourceClaim(_ context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
	o.asked = append(o.asked, "claim "+name)
	c, ok := o.claims[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
	}
	return c.DeepCopy(), nil
}

func (o *objects) ResourceSlices(_ context.Context, node, drv string) ([]resourceapi.ResourceSlice, error) {
	o.asked = append(o.asked, "slices "+drv)
	var out []resourceapi.ResourceSlice
	for _, s := range o.slices {
		if s.Spec.Driver == drv && ptr.Deref(s.Spec.NodeName, "") == node {
			out = append(out, s)
		}
	}
	return out, nil
}

func (o *objects) IsNotFound(err error) bool { return apierrors.IsNotFound(err) }

const (
	hostdev  = "example.com/hostdev"
	extClaim = "p-extended-resources-x7k2p"
)

// extendedPod is a pod on node1 with resources.limits {example.com/hostdev: 2}
// in container c (index 0) as the scheduler leaves it: the claim it made,
// allocated ens2f0 and ens2f1 for request container-0-request-0 and reserved
// for the pod, and the pod's status.extendedResourceClaimStatus. The slice
// publishes the devices with attrs.
func extendedPod(attrs func(id string) map[string]string) *objects {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "pod-uid"},
		Spec: corev1.PodSpec{NodeName: "node1"},
		Status: corev1.PodStatus{ExtendedResourceClaimStatus: &corev1.PodExtendedResourceClaimStatus{
			ResourceClaimName: extClaim,
			RequestMappings:   []corev1.ContainerExtendedResourceRequest{{ContainerName: "c", ResourceName: hostdev, RequestName: "container-0-request-0"}},
		}}}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: extClaim,
			Annotations:     map[string]string{dradevice.ExtendedResourceClaimAnnotation: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "pod-uid", Controller: ptr.To(true)}}},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "container-0-request-0", Driver: driver, Pool: "node1", Device: "ens2f0"},
				{Request: "container-0-request-0", Driver: driver, Pool: "node1", Device: "ens2f1"},
			}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod-uid"}},
		}}
	slice := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To("node1"),
		Pool: resourceapi.ResourcePool{Name: "node1", Generation: 1, ResourceSliceCount: 1}}}
	for _, id := range []string{"ens2f0", "ens2f1"} {
		d := resourceapi.Device{Name: id, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
		for k, v := range attrs(id) {
			d.Attributes[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
		}
		slice.Spec.Devices = append(slice.Spec.Devices, d)
	}
	return &objects{pod: pod, claims: map[string]*resourceapi.ResourceClaim{"ns/" + extClaim: claim}, slices: []resourceapi.ResourceSlice{slice}}
}

func netdevAttrs(res string) func(string) map[string]string {
	return func(id string) map[string]string {
		m := map[string]string{dradevice.AttrDeviceID: id}
		if res != "" {
			m[dradevice.AttrResourceName] = res
		}
		return m
	}
}

func ids(devs []dradevice.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.ResourceName+"="+d.ID+"@"+d.Claim.Name+"/"+d.Claim.Request)
	}
	return out
}

// The API path finds the devices of an extended resource through the pod's
// status.extendedResourceClaimStatus (no spec.resourceClaims entry names the
// claim): with netdev-dp's attributes; without a resourceName attribute,
// where the request mapping alone says they serve the resource; and by a
// name the DeviceClass gives the extended resource (the implicit
// deviceclass.resource.kubernetes.io/<class>), the devices keeping their
// driver's resource, by which their DP files are named.
func TestResolveExtendedResource(t *testing.T) {
	want := []string{hostdev + "=ens2f0@" + extClaim + "/container-0-request-0", hostdev + "=ens2f1@" + extClaim + "/container-0-request-0"}
	for name, tc := range map[string]struct {
		attrs    func(string) map[string]string
		resource string
	}{
		"netdev-dp attributes":         {netdevAttrs(hostdev), hostdev},
		"no resourceName attribute":    {netdevAttrs(""), hostdev},
		"implicit extended class name": {netdevAttrs(hostdev), "deviceclass.resource.kubernetes.io/hostdev.example.com"},
	} {
		t.Run(name, func(t *testing.T) {
			o := extendedPod(tc.attrs)
			o.pod.Status.ExtendedResourceClaimStatus.RequestMappings[0].ResourceName = tc.resource
			devs, err := dradevice.Resolve(t.Context(), o, dradevice.Query{Namespace: "ns", Pod: "p", UID: "pod-uid", ResourceName: tc.resource})
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(devs); !reflect.DeepEqual(got, want) {
				t.Errorf("devices %v, want %v", got, want)
			}
		})
	}
}

// Matched by the resourceName attribute alone, the claim's devices are found
// for a resource no mapping names (a config naming the driver's resource
// while the pod asked for it under another extended resource name); a
// resource neither the mapping nor an attribute names finds nothing, and a
// pod without the status reads no claim at all.
func TestResolveExtendedByAttribute(t *testing.T) {
	o := extendedPod(netdevAttrs(hostdev))
	o.pod.Status.ExtendedResourceClaimStatus.RequestMappings[0].ResourceName = "deviceclass.resource.kubernetes.io/hostdev.example.com"
	devs, err := dradevice.Resolve(t.Context(), o, dradevice.Query{Namespace: "ns", Pod: "p", ResourceName: hostdev})
	if err != nil || len(devs) != 2 {
		t.Fatalf("by attribute: %v, %v", ids(devs), err)
	}
	devs, err = dradevice.Resolve(t.Context(), o, dradevice.Query{Namespace: "ns", Pod: "p", ResourceName: "example.com/vf"})
	if err != nil || len(devs) != 0 {
		t.Fatalf("another resource: %v, %v", ids(devs), err)
	}
	o.pod.Status.ExtendedResourceClaimStatus = nil
	o.asked = nil
	devs, err = dradevice.Resolve(t.Context(), o, dradevice.Query{Namespace: "ns", Pod: "p", ResourceName: hostdev})
	if err != nil || len(devs) != 0 || !reflect.DeepEqual(o.asked, []string{"pod p"}) {
		t.Fatalf("no extended resources: %v, %v, asked %v", ids(devs), err, o.asked)
	}
}

// A claim the status names that is not the scheduler's for this pod, not
// allocated, or not reserved for it gives no device, and the error says
// which and why; unmapped for the resource, the same claim is no error.
func TestResolveExtendedClaimRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*objects)
		why    string
	}{
		"missing":       {func(o *objects) { delete(o.claims, "ns/"+extClaim) }, "does not exist"},
		"no annotation": {func(o *objects) { o.claims["ns/"+extClaim].Annotations = nil }, "extended-resource-claim=true"},
		"another pod's": {func(o *objects) { o.claims["ns/"+extClaim].OwnerReferences[0].UID = types.UID("old") }, "Pod is not owner"},
		"unallocated":   {func(o *objects) { o.claims["ns/"+extClaim].Status.Allocation = nil }, "not allocated"},
		"unreserved":    {func(o *objects) { o.claims["ns/"+extClaim].Status.ReservedFor = nil }, "not reserved"},
	} {
		t.Run(name, func(t *testing.T) {
			o := extendedPod(netdevAttrs(hostdev))
			tc.change(o)
			_, err := dradevice.Resolve(t.Context(), o, dradevice.Query{Namespace: "ns", Pod: "p", ResourceName: hostdev})
			if !errors.Is(err, dradevice.ErrNoDevice) || !strings.Contains(err.Error(), extClaim) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("error %v, want ErrNoDevice naming the claim and %q", err, tc.why)
			}
			devs, err := dradevice.Resolve(t.Context(), o, dradevice.Query{Namespace: "ns", Pod: "p", ResourceName: "example.com/vf"})
			if err != nil || len(devs) != 0 {
				t.Fatalf("unmapped resource: %v, %v", ids(devs), err)
			}
		})
	}
}
