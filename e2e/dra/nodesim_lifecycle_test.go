package dra_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/podresources"
)

func simWebSpec(ns, name string, claims ...kubeletsim.PodClaim) kubeletsim.PodSpec {
	var refs []string
	for _, c := range claims {
		refs = append(refs, c.Name)
	}
	return kubeletsim.PodSpec{Namespace: ns, Name: name, Claims: claims,
		Containers: []kubeletsim.ContainerSpec{{Name: "app", Claims: refs}}}
}

func TestNodesimDRARestartKeepsPreparedClaims(t *testing.T) {
	const node = "restart-node"
	root, n := simNode(t, node)
	d := simStartDriver(t, root, node, simDriverName, []string{"dev0", "dev1"})
	if err := n.WaitDRADriver(e2etest.Ctx(t), simDriverName); err != nil {
		t.Fatal(err)
	}
	ns := simNamespace(t, "nodesim-restart")
	simDeviceClass(t, "nodesim-restart", simDriverName)
	simTemplate(t, ns, "net", "nodesim-restart", 1)
	alloc, err := n.AddPod(e2etest.Ctx(t), simWebSpec(ns, "web", kubeletsim.PodClaim{Name: "net", ResourceClaimTemplateName: "net"}))
	if err != nil {
		t.Fatal(err)
	}
	n.Stop()

	// A kubelet restart: the checkpoint keeps the prepared claim, the driver
	// is registered again from its socket without doing anything.
	n = simStartNode(t, root, node)
	pr, err := podresources.New(n.PodResourcesSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	drs, err := pr.DynamicResources(e2etest.Ctx(t), ns, "web")
	if err != nil || len(drs) != 1 || drs[0].GetClaimName() != alloc.Claims[0].Name ||
		drs[0].GetClaimResources()[0].GetDeviceName() != alloc.Claims[0].Devices[0].Device {
		t.Fatalf("after restart PodResources reports %v (%v), want claim %s with device %s",
			drs, err, alloc.Claims[0].Name, alloc.Claims[0].Devices[0].Device)
	}
	if err := n.WaitDRADriver(e2etest.Ctx(t), simDriverName); err != nil {
		t.Fatalf("driver not registered again after restart: %v", err)
	}
	if _, calls, _ := d.state(); len(calls) != 1 {
		t.Errorf("driver asked to prepare %v: a restart must not prepare again", calls)
	}
	if err := n.DelPodContext(e2etest.Ctx(t), ns, "web"); err != nil {
		t.Fatal(err)
	}
	if prepared, _, unprepared := d.state(); len(prepared) != 0 || len(unprepared) != 1 {
		t.Errorf("after pod del: prepared %v, unprepared %v", prepared, unprepared)
	}
	if left := simClaimsIn(t, ns); len(left) != 0 {
		t.Errorf("claims left after pod del: %v", simClaimNames(left))
	}
}

func TestNodesimDRASharedClaimIsPreparedOnce(t *testing.T) {
	const node = "shared-node"
	root, n := simNode(t, node)
	d := simStartDriver(t, root, node, simDriverName, []string{"dev0"})
	if err := n.WaitDRADriver(e2etest.Ctx(t), simDriverName); err != nil {
		t.Fatal(err)
	}
	ns := simNamespace(t, "nodesim-shared")
	simDeviceClass(t, "nodesim-shared", simDriverName)
	simClaim(t, ns, "shared", "nodesim-shared")
	pc := kubeletsim.PodClaim{Name: "net", ResourceClaimName: "shared"}
	a, err := n.AddPod(e2etest.Ctx(t), simWebSpec(ns, "a", pc))
	if err != nil {
		t.Fatal(err)
	}
	// b accepts the allocation a's admission wrote: the only device is taken.
	b, err := n.AddPod(e2etest.Ctx(t), simWebSpec(ns, "b", pc))
	if err != nil {
		t.Fatalf("second pod with the allocated claim: %v", err)
	}
	if !slices.Equal(a.Claims[0].Devices[0].CDIDeviceIDs, b.Claims[0].Devices[0].CDIDeviceIDs) {
		t.Errorf("shared claim prepared as %+v for a and %+v for b", a.Claims[0].Devices, b.Claims[0].Devices)
	}
	if cl := simGetClaim(t, ns, "shared"); len(cl.Status.ReservedFor) != 2 {
		t.Errorf("reservedFor %+v, want both pods", cl.Status.ReservedFor)
	}
	if err := n.DelPodContext(e2etest.Ctx(t), ns, "a"); err != nil {
		t.Fatal(err)
	}
	if _, calls, unprepared := d.state(); len(calls) != 1 || len(unprepared) != 0 {
		t.Errorf("prepare calls %v, unprepared %v: want one prepare and no unprepare while b holds it", calls, unprepared)
	}
	if cl := simGetClaim(t, ns, "shared"); cl.Status.Allocation == nil || len(cl.Status.ReservedFor) != 1 || cl.Status.ReservedFor[0].Name != "b" {
		t.Errorf("after a's del: allocation %v reservedFor %+v, want still allocated for b", cl.Status.Allocation, cl.Status.ReservedFor)
	}
	if err := n.DelPodContext(e2etest.Ctx(t), ns, "b"); err != nil {
		t.Fatal(err)
	}
	if _, _, unprepared := d.state(); len(unprepared) != 1 {
		t.Errorf("unprepared %v after the last pod went, want the claim", unprepared)
	}
	if cl := simGetClaim(t, ns, "shared"); cl.Status.Allocation != nil || len(cl.Finalizers) != 0 {
		t.Errorf("claim no one reserves is still allocated (%v) or protected (%v)", cl.Status.Allocation, cl.Finalizers)
	}
}

func TestNodesimDRABadInputLeavesNothing(t *testing.T) {
	const node = "bad-node"
	root, n := simNode(t, node)
	d := simStartDriver(t, root, node, simDriverName, []string{"dev0"})
	if err := n.WaitDRADriver(e2etest.Ctx(t), simDriverName); err != nil {
		t.Fatal(err)
	}
	ns := simNamespace(t, "nodesim-bad")
	simDeviceClass(t, "nodesim-bad", simDriverName)
	simDeviceClass(t, "nodesim-bad-ghost", "ghost.devplumb.io")
	simGhostSlice(t, node)
	simTemplate(t, ns, "one", "nodesim-bad", 1)
	simTemplate(t, ns, "two", "nodesim-bad", 2)
	simTemplate(t, ns, "ghost", "nodesim-bad-ghost", 1)
	simClaim(t, ns, "direct", "nodesim-bad")
	tmpl := func(name, t string) kubeletsim.PodClaim {
		return kubeletsim.PodClaim{Name: name, ResourceClaimTemplateName: t}
	}
	for _, tc := range []struct {
		name     string
		spec     kubeletsim.PodSpec
		sentinel error
		want     string
	}{
		{"unknown claim", simWebSpec(ns, "p", kubeletsim.PodClaim{Name: "x", ResourceClaimName: "nope"}),
			kubeletsim.ErrInvalidPod, "ResourceClaim nodesim-bad/nope not found"},
		{"unknown template", simWebSpec(ns, "p", tmpl("x", "nope")),
			kubeletsim.ErrInvalidPod, "ResourceClaimTemplate nodesim-bad/nope not found"},
		{"second claim unknown", simWebSpec(ns, "p", tmpl("a", "one"), tmpl("b", "nope")),
			kubeletsim.ErrInvalidPod, `pod claim "b"`},
		{"no device fits", simWebSpec(ns, "p", tmpl("x", "two")),
			kubeletsim.ErrAdmission, "no free devices in the node's ResourceSlices"},
		{"driver not registered", simWebSpec(ns, "p", kubeletsim.PodClaim{Name: "d", ResourceClaimName: "direct"}, tmpl("g", "ghost")),
			kubeletsim.ErrAdmission, "DRA driver ghost.devplumb.io is not registered"},
		{"container references no pod claim", kubeletsim.PodSpec{Namespace: ns, Name: "p", Claims: []kubeletsim.PodClaim{tmpl("a", "one")},
			Containers: []kubeletsim.ContainerSpec{{Name: "app", Claims: []string{"b"}}}},
			kubeletsim.ErrInvalidPod, `container "app" references claim "b", which is not a claim of the pod`},
		{"new pod without containers", kubeletsim.PodSpec{Namespace: ns, Name: "p", Claims: []kubeletsim.PodClaim{tmpl("a", "one")}},
			kubeletsim.ErrInvalidPod, "a new one needs a container"},
		{"claim and template both", simWebSpec(ns, "p", kubeletsim.PodClaim{Name: "a", ResourceClaimName: "direct", ResourceClaimTemplateName: "one"}),
			kubeletsim.ErrInvalidPod, "exactly one of"},
	} {
		_, err := n.AddPod(e2etest.Ctx(t), tc.spec)
		if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: AddPod = %v, want %v with %q", tc.name, err, tc.sentinel, tc.want)
		}
		simCheckNothingLeft(t, n, d, ns, tc.name)
	}

	// The driver fails to prepare: the error says so, nothing stays.
	d.setFail("no such VF")
	_, err := n.AddPod(e2etest.Ctx(t), simWebSpec(ns, "p", tmpl("a", "one")))
	if !errors.Is(err, kubeletsim.ErrAdmission) || !strings.Contains(err.Error(), "NodePrepareResources failed for ResourceClaim p-a-") ||
		!strings.Contains(err.Error(), "no such VF") {
		t.Errorf("prepare failure: AddPod = %v", err)
	}
	simCheckNothingLeft(t, n, d, ns, "prepare failure")
	d.setFail("")

	// After all that the device is free: a good pod gets it.
	if _, err := n.AddPod(e2etest.Ctx(t), simWebSpec(ns, "p", tmpl("a", "one"))); err != nil {
		t.Fatalf("good pod after the bad ones: %v", err)
	}
	if err := n.DelPodContext(e2etest.Ctx(t), ns, "p"); err != nil {
		t.Fatal(err)
	}
}

// checkNothingLeft: no nodesim pod, no Pod object, only the direct claim,
// unallocated, and nothing prepared.
func simCheckNothingLeft(t *testing.T, n *kubeletsim.Node, d *simDriver, ns, what string) {
	t.Helper()
	if pods := n.Pods(); len(pods) != 0 {
		t.Errorf("%s: nodesim kept pods %+v", what, pods)
	}
	if _, ok := simGetPod(t, ns, "p"); ok {
		t.Errorf("%s: Pod object left", what)
	}
	left := simClaimsIn(t, ns)
	if len(left) != 1 || left[0].Name != "direct" || left[0].Status.Allocation != nil ||
		len(left[0].Status.ReservedFor) != 0 || len(left[0].Finalizers) != 0 {
		t.Errorf("%s: claims left %v (want only direct, unallocated): %+v", what, simClaimNames(left), left)
	}
	if prepared, _, _ := d.state(); len(prepared) != 0 {
		t.Errorf("%s: driver has %v prepared", what, prepared)
	}
}

// ghostSlice publishes, straight through the API, a device of a driver that
// never registers on the node.
func simGhostSlice(t *testing.T, node string) {
	t.Helper()
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-ghost"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "ghost.devplumb.io", NodeName: ptr.To(node),
			Pool:    resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "g0"}}}}
	if _, err := srv.Client.ResourceV1().ResourceSlices().Create(e2etest.Ctx(t), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { simDeleteSlices(t, node, "ghost.devplumb.io") })
}

func TestNodesimDRAPodObjectMustAgree(t *testing.T) {
	const node = "agree-node"
	root, n := simNode(t, node)
	simStartDriver(t, root, node, simDriverName, []string{"dev0"})
	ns := simNamespace(t, "nodesim-agree")
	simClaim(t, ns, "direct", "nodesim-agree")
	// A pod on another node is not this node's to admit; it stays.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"},
		Spec: corev1.PodSpec{NodeName: "other-node", Containers: []corev1.Container{{Name: "app", Image: "pause"}}}}
	if _, err := srv.Client.CoreV1().Pods(ns).Create(e2etest.Ctx(t), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := n.AddPod(e2etest.Ctx(t), simWebSpec(ns, "elsewhere", kubeletsim.PodClaim{Name: "net", ResourceClaimName: "direct"}))
	if !errors.Is(err, kubeletsim.ErrInvalidPod) || !strings.Contains(err.Error(), `is on node "other-node", not on this node "agree-node"`) {
		t.Errorf("pod on another node: %v", err)
	}
	if _, ok := simGetPod(t, ns, "elsewhere"); !ok {
		t.Error("the other node's Pod object was deleted")
	}

	// Without an API server, claims are refused.
	plainRoot, err := os.MkdirTemp("", "ns")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(plainRoot)
	plain, err := kubeletsim.Start(context.Background(), plainRoot, simLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	_, err = plain.AddPod(e2etest.Ctx(t), simWebSpec(ns, "p", kubeletsim.PodClaim{Name: "net", ResourceClaimName: "direct"}))
	if !errors.Is(err, kubeletsim.ErrInvalidPod) || !strings.Contains(err.Error(), "no API server") {
		t.Errorf("claims without DRA: %v", err)
	}
}
