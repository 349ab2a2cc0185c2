package dra_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// applyManifest server-side applies every object of deployments/<file>, as
// `kubectl apply --server-side` does (over what an older release applied), and deletes
// them when the test ends.
func applyManifest(t *testing.T, file string) {
	t.Helper()
	objs, m := manifestObjects(t, file)
	for _, o := range objs {
		e2etest.Must(t, m.ServerSideApply(e2etest.Ctx(t), o, "kubectl"))
		t.Cleanup(func() { _ = m.Delete(e2etest.Ctx(t), o) })
	}
}

// manifestObjects are the objects of deployments/<file> and the applier for them.
func manifestObjects(t *testing.T, file string) ([]*unstructured.Unstructured, *e2etest.Manifests) {
	t.Helper()
	objs, err := e2etest.Objects(filepath.Join(testenv.ModuleRoot(), "deployments", file))
	e2etest.Must(t, err)
	m, err := e2etest.NewManifests(srv.Config)
	e2etest.Must(t, err)
	return objs, m
}

// removeManifest deletes the objects of deployments/<file> and waits until they are gone.
func removeManifest(t *testing.T, file string) {
	t.Helper()
	objs, m := manifestObjects(t, file)
	for _, o := range objs {
		e2etest.Must(t, m.Delete(e2etest.Ctx(t), o))
		ri, err := m.Resource(o)
		e2etest.Must(t, err)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if _, err := ri.Get(e2etest.Ctx(t), o.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s not gone within a minute", o.GetKind(), o.GetName())
			}
		}
	}
}

// refusedBy waits up to a minute (policies reach the admission plugin through informers)
// for write to be refused by the admission policy, and fails the test if it is not.
func refusedBy(t *testing.T, policy string, write func(context.Context) error) {
	t.Helper()
	refusedWith(t, policy, "", write)
}

// refusedWith is refusedBy where the refusal must also say msg.
func refusedWith(t *testing.T, policy, msg string, write func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := write(e2etest.Ctx(t))
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'") {
			if !strings.Contains(err.Error(), msg) {
				t.Fatalf("refused by %s, but not saying %q: %v", policy, msg, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not refused by %s within a minute: %v", policy, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func tokenClient(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	return drvClientFor(t, kubeapi.Kubeconfig(srv.URL, token))
}

// patchPod patches the pod's network-status annotation, as devplumb does (a JSON merge
// patch of that annotation alone).
func patchPod(c kubernetes.Interface, name string) func(context.Context) error {
	return patchPodWith(c, name, types.MergePatchType, statusPatch)
}

// statusPatch is patchPod's patch.
const statusPatch = `{"metadata":{"annotations":{` + networkStatusKey + `}}}`

// networkStatusKey is a network-status annotation of one entry, a JSON object member.
const networkStatusKey = `"k8s.v1.cni.cncf.io/network-status":"[{\"name\":\"net\",\"interface\":\"net1\"}]"`

func patchPodWith(c kubernetes.Interface, name string, pt types.PatchType, patch string) func(context.Context) error {
	return patchPodOpts(c, name, pt, patch, metav1.PatchOptions{})
}

func patchPodOpts(c kubernetes.Interface, name string, pt types.PatchType, patch string, opts metav1.PatchOptions) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.CoreV1().Pods(cniNS).Patch(ctx, name, pt, []byte(patch), opts)
		return err
	}
}

// applyClaimStatus applies a status.devices[] entry of the claim's dev-0, as devplumb does.
func applyClaimStatus(c kubernetes.Interface, claim, driver, pool string) func(context.Context) error {
	return func(ctx context.Context) error {
		ac := resourceac.ResourceClaim(claim, cniNS).WithStatus(resourceac.ResourceClaimStatus().WithDevices(
			resourceac.AllocatedDeviceStatus().WithDriver(driver).WithPool(pool).WithDevice("dev-0").
				WithNetworkData(resourceac.NetworkDeviceData().WithInterfaceName("net1"))))
		_, err := c.ResourceV1().ResourceClaims(cniNS).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: "devplumb/test", Force: true})
		return err
	}
}

// node-policy.yaml: devplumb's token of node A patches A's pods and writes the status of
// claims allocated on A, and nothing of node B, even where its RBAC would allow it (here
// an over-broad arbitrary-node:patch); a devplumb credential naming no node writes nothing.
func TestNodePolicyDevplumb(t *testing.T) {
	bindCNIRole(t, "cni-arbitrary-node", append(shippedRules(t), rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"},
		Resources: []string{"resourceclaims/driver"}, Verbs: []string{"arbitrary-node:patch"}}))
	applyManifest(t, "node-policy.yaml")
	a, b := newCNINode(t), newCNINode(t)
	_, podA, claimA := a.oneDevicePod(false)
	_, podB, claimB := b.oneDevicePod(false)
	asA := tokenClient(t, podBoundToken(t, "devplumb-daemonset.yaml", a.name))

	refusedBy(t, "devplumb-node-scope", patchPod(asA, podB.Name))
	refusedBy(t, "devplumb-node-scope", applyClaimStatus(asA, claimB, b.driver, b.name))
	e2etest.Must(t, patchPod(asA, podA.Name)(e2etest.Ctx(t)))
	e2etest.Must(t, applyClaimStatus(asA, claimA, a.driver, a.name)(e2etest.Ctx(t)))

	noNode := tokenClient(t, srv.DevplumbToken) // a static token: no node in it
	refusedBy(t, "devplumb-node-scope", patchPod(noNode, podA.Name))
}

// node-policy.yaml holds devplumb's pod writes to the network-status annotation and its
// claim writes to status.devices: with node A's token, on A's own pod and claim, and
// RBAC that would allow all of it (pods create, update, delete), a network-status patch
// goes through; a patch of labels, another annotation, finalizers, ownerReferences or the
// spec (a container's image), a pod create or delete, and a claim status write that
// clears reservedFor (with resourceclaims/binding granted, which 1.37 also asks) are all
// refused with the policy's message. (The policy before this
// one held only the node: it let every one of these patches through.)
func TestNodePolicyDevplumbEditsOnlyNetworkStatus(t *testing.T) {
	bindCNIRole(t, "cni-all-pod-writes", append(shippedRules(t),
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "update", "delete"}},
		// Kubernetes 1.37 asks for this too before a write may change reservedFor.
		rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/binding"}, Verbs: []string{"patch"}}))
	applyManifest(t, "node-policy.yaml")
	a, b := newCNINode(t), newCNINode(t)
	_, podA, claimA := a.oneDevicePod(false)
	_, podB, _ := b.oneDevicePod(false)
	asA := tokenClient(t, podBoundToken(t, "devplumb-daemonset.yaml", a.name))
	refusedBy(t, "devplumb-node-scope", patchPod(asA, podB.Name)) // the policy is in force

	e2etest.Must(t, patchPod(asA, podA.Name)(e2etest.Ctx(t)))
	merge := func(patch func() string) func(context.Context) error {
		return func(ctx context.Context) error {
			return patchPodWith(asA, podA.Name, types.MergePatchType, patch())(ctx)
		}
	}
	for _, tc := range []struct {
		changes string
		patch   func() string // new each time, so no retry is a no-op
	}{
		{"labels", func() string { return `{"metadata":{"labels":{"app":"` + cniRandom() + `"}}}` }},
		{"other annotations", func() string { return `{"metadata":{"annotations":{"devplumb.io/test":"` + cniRandom() + `"}}}` }},
		{"finalizers", func() string { return `{"metadata":{"finalizers":["devplumb.io/` + cniRandom() + `"]}}` }},
		{"ownerReferences", func() string {
			return `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"` + cniRandom() + `"}]}}`
		}},
		// With network-status beside it: the one allowed change does not carry another.
		{"labels", func() string {
			return `{"metadata":{"labels":{"app":"` + cniRandom() + `"},"annotations":{` + networkStatusKey + `}}}`
		}},
	} {
		refusedWith(t, "devplumb-node-scope", "also changes its "+tc.changes, merge(tc.patch))
	}
	image := func(ctx context.Context) error {
		return patchPodWith(asA, podA.Name, types.StrategicMergePatchType,
			`{"spec":{"containers":[{"name":"c","image":"busybox:`+cniRandom()+`"}]}}`)(ctx)
	}
	refusedWith(t, "devplumb-node-scope", "also changes its spec", image)
	refusedWith(t, "devplumb-node-scope", "may not delete pods", func(ctx context.Context) error {
		return asA.CoreV1().Pods(cniNS).Delete(ctx, podA.Name, metav1.DeleteOptions{})
	})
	refusedWith(t, "devplumb-node-scope", "may not create pods", func(ctx context.Context) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cniNS, Name: "made-by-devplumb-" + cniRandom()},
			Spec: corev1.PodSpec{NodeName: a.name, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		_, err := asA.CoreV1().Pods(cniNS).Create(ctx, p, metav1.CreateOptions{})
		return err
	})

	e2etest.Must(t, applyClaimStatus(asA, claimA, a.driver, a.name)(e2etest.Ctx(t)))
	refusedWith(t, "devplumb-node-scope", "also changes its status.reservedFor", func(ctx context.Context) error {
		_, err := asA.ResourceV1().ResourceClaims(cniNS).Patch(ctx, claimA, types.MergePatchType,
			[]byte(`{"status":{"reservedFor":null}}`), metav1.PatchOptions{}, "status")
		return err
	})
	rc, err := srv.Client.ResourceV1().ResourceClaims(cniNS).Get(e2etest.Ctx(t), claimA, metav1.GetOptions{})
	e2etest.Must(t, err)
	if len(rc.Status.ReservedFor) != 1 || rc.Status.Allocation == nil {
		t.Errorf("claim after the refused writes: reservedFor %+v, allocation %v", rc.Status.ReservedFor, rc.Status.Allocation)
	}
	pod, err := srv.Client.CoreV1().Pods(cniNS).Get(e2etest.Ctx(t), podA.Name, metav1.GetOptions{})
	e2etest.Must(t, err)
	if len(pod.Labels) != 0 || len(pod.Finalizers) != 0 || len(pod.OwnerReferences) != 0 || len(pod.Annotations) != 1 ||
		pod.Spec.Containers[0].Image != podA.Spec.Containers[0].Image {
		t.Errorf("pod after the refused writes: %+v", pod.ObjectMeta)
	}
}

// dra/node-policy.yaml: netdev-dp's token of node A creates, updates and deletes A's
// ResourceSlices of its own driver (netdev.devplumb.io), none of node B's, and none of
// another driver on A.
func TestNodePolicyNetdevDP(t *testing.T) {
	applyDRADeployment(t)
	applyManifest(t, "dra/node-policy.yaml")
	nodeA, nodeB := "slice-a-"+cniRandom(), "slice-b-"+cniRandom()
	asA := tokenClient(t, podBoundToken(t, "dra/netdev-dp-dra.yaml", nodeA))
	slices := asA.ResourceV1().ResourceSlices()
	refusedBy(t, "netdev-dp-node-scope", sliceProbe(asA, nodeB))
	// Its own node, another driver's name: refused (the policy before this one allowed it).
	refusedWith(t, "netdev-dp-node-scope", "only ResourceSlices of its driver", func(ctx context.Context) error {
		s := testSlice(nodeA+"-other", nodeA)
		s.Spec.Driver = "other.example.com"
		_, err := slices.Create(ctx, s, metav1.CreateOptions{})
		if err == nil {
			_ = srv.Client.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
		return err
	})
	for c, node := range map[kubernetes.Interface]string{srv.Client: nodeB, asA: nodeA} { // B's own driver made B's
		_, err := c.ResourceV1().ResourceSlices().Create(e2etest.Ctx(t), testSlice(node, node), metav1.CreateOptions{})
		e2etest.Must(t, err)
		t.Cleanup(func() {
			_ = srv.Client.ResourceV1().ResourceSlices().Delete(e2etest.Ctx(t), node, metav1.DeleteOptions{})
		})
	}
	for _, node := range []string{nodeA, nodeB} {
		s, err := slices.Get(e2etest.Ctx(t), node, metav1.GetOptions{})
		e2etest.Must(t, err)
		s.Spec.Pool.Generation++
		_, uerr := slices.Update(e2etest.Ctx(t), s, metav1.UpdateOptions{})
		derr := slices.Delete(e2etest.Ctx(t), node, metav1.DeleteOptions{})
		if got, want := uerr == nil && derr == nil, node == nodeA; got != want {
			t.Errorf("slice of %s: update %v, delete %v; want allowed=%v", node, uerr, derr, want)
		}
		if node == nodeB && (!apierrors.IsForbidden(uerr) || !apierrors.IsForbidden(derr)) {
			t.Errorf("slice of another node: update %v, delete %v, want Forbidden by the policy", uerr, derr)
		}
	}
}

// sliceProbe creates a slice of node as c; one the API server accepts (the policy not in
// force yet) is deleted again, so the probe can be repeated.
func sliceProbe(c kubernetes.Interface, node string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.ResourceV1().ResourceSlices().Create(ctx, testSlice(node, node), metav1.CreateOptions{})
		if err == nil {
			_ = srv.Client.ResourceV1().ResourceSlices().Delete(ctx, node, metav1.DeleteOptions{})
		}
		return err
	}
}

// patchPodDryRun is patchPod's write as a dry run: admission decides, nothing changes, so
// a probe the policy lets through while it settles leaves no entry on the pod.
func patchPodDryRun(c kubernetes.Interface, name string) func(context.Context) error {
	return patchPodOpts(c, name, types.MergePatchType, statusPatch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
}

// delRemovesStatus runs DEL and checks that the pod's network-status entry is gone,
// saying what was left and devplumb's log (its removal is best-effort, logged only).
func delRemovesStatus(t *testing.T, n *cniNode, conf map[string]any, netns string, pod *corev1.Pod) {
	t.Helper()
	res := n.run("DEL", conf, netns, pod, "net1")
	if left := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name); res.Code != 0 || len(left) != 0 {
		t.Fatalf("DEL after the upgrade: %+v, network-status left %+v; its log:\n%s", res, left, res.Stderr)
	}
}

// allowedWithin waits up to a minute for write to succeed.
func allowedWithin(t *testing.T, what string, write func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := write(e2etest.Ctx(t))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not allowed within a minute: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// testSlice is a one-device slice of node, named name.
func testSlice(name, node string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{Driver: drvDriver, NodeName: &node,
			Pool:    resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "dev-0"}}}}
}

// An upgrade: a node runs under the manifests of the release before (testdata: rbac.yaml
// without the driver rule, no policies), devplumb writing its pod's network-status
// (best-effort: that release's RBAC cannot write claim status on 1.37) and netdev-dp its
// slice. Applying this release's rbac.yaml and both node policies over them, with the
// same credentials, nothing restarted: the node's pod, claim and slice are all writable.
func TestNodePolicyUpgrade(t *testing.T) {
	old, err := e2etest.Objects(filepath.Join(testenv.ModuleRoot(), "e2e", "dra", "testdata", "rbac-before-node-scope.yaml"))
	e2etest.Must(t, err)
	m, err := e2etest.NewManifests(srv.Config)
	e2etest.Must(t, err)
	for _, o := range old {
		e2etest.Must(t, m.ServerSideApply(e2etest.Ctx(t), o, "kubectl"))
		t.Cleanup(func() { _ = m.Delete(e2etest.Ctx(t), o) })
	}
	waitAllowed(t, true, "patch", "resourceclaims", "status", "the old RBAC is not granted within a minute")
	applyDRADeployment(t)
	removeManifest(t, "dra/node-policy.yaml") // the old release had no policy
	n := newCNINode(t)
	// One token only: another would recreate the pod this one is bound to, voiding it (401).
	token := podBoundToken(t, "devplumb-daemonset.yaml", n.name)
	kc := writeKubeconfig(t, filepath.Join(n.dir, "devplumb.kubeconfig"), token)
	dpA := tokenClient(t, podBoundToken(t, "dra/netdev-dp-dra.yaml", n.name))
	_, err = dpA.ResourceV1().ResourceSlices().Create(e2etest.Ctx(t), testSlice(n.name+"-dp", n.name), metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() {
		_ = srv.Client.ResourceV1().ResourceSlices().Delete(e2etest.Ctx(t), n.name+"-dp", metav1.DeleteOptions{})
	})
	_, pod, claimName := n.oneDevicePod(false)
	conf := n.conf(map[string]any{"resourceClaim": "net", "kubeconfig": kc, "networkStatus": "best-effort"})
	netns := testenv.NetNS(t).Path()
	if res := n.run("ADD", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("ADD under the old manifests: %+v", res)
	}

	applyManifest(t, "rbac.yaml")
	applyManifest(t, "node-policy.yaml")
	applyManifest(t, "dra/node-policy.yaml")
	waitAllowed(t, true, "associated-node:patch", "resourceclaims", "driver", "the new rule is not granted within a minute")
	// The policies are in force: another node's pod and slice are refused.
	refusedBy(t, "netdev-dp-node-scope", sliceProbe(dpA, "other-"+n.name))
	refusedBy(t, "devplumb-node-scope", patchPodDryRun(tokenClient(t, podBoundToken(t, "devplumb-daemonset.yaml", "other-"+n.name)), pod.Name))

	s, err := dpA.ResourceV1().ResourceSlices().Get(e2etest.Ctx(t), n.name+"-dp", metav1.GetOptions{})
	e2etest.Must(t, err)
	s.Spec.Pool.Generation++
	if _, err := dpA.ResourceV1().ResourceSlices().Update(e2etest.Ctx(t), s, metav1.UpdateOptions{}); err != nil {
		t.Errorf("netdev-dp's own slice after the upgrade: %v", err)
	}
	// A policy takes effect on each API server a while after it is made: wait until the
	// node's own devplumb may patch its pod (dry run) before DEL, whose removal of the
	// entry is best-effort here and would be skipped, logged, while the policy settles.
	allowedWithin(t, "devplumb's patch of its own node's pod", patchPodDryRun(tokenClient(t, token), pod.Name))
	// The pod's entry, written before, goes with the same kubeconfig; then a required ADD
	// writes the claim's status too, and DEL removes it.
	delRemovesStatus(t, n, conf, netns, pod)
	conf["networkStatus"] = "required"
	if res := n.run("ADD", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("ADD after the upgrade: %+v", res)
	}
	if st := deviceStatus(t, claimName, n.driver, "dev-0"); st == nil || st.NetworkData == nil {
		t.Errorf("claim status after the upgrade: %+v", st)
	}
	if res := n.run("DEL", conf, netns, pod, "net1"); res.Code != 0 || deviceStatus(t, claimName, n.driver, "dev-0") != nil {
		t.Errorf("DEL after the upgrade: %+v", res)
	}
	if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name); len(ns) != 0 {
		t.Errorf("network-status after DEL: %+v", ns)
	}
}
