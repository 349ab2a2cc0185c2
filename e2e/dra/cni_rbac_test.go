package dra_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// With deployments/rbac.yaml as shipped, devplumb's service account reads
// the pod, the claim and the slices and applies the claim's status (the API
// path, ADD and DEL), and may not do more with the DRA objects.
func TestCNIShippedRBAC(t *testing.T) {
	applyCNIRBAC(t)
	n := newCNINode(t)
	kc := n.devplumbKubeconfig()
	_, pod, claimName := n.oneDevicePod(true)
	conf := n.conf(map[string]any{"resourceClaim": "net", "kubeconfig": kc})
	netns := testenv.NetNS(t).Path()
	if res := n.run("ADD", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("ADD as devplumb: %+v", res)
	}
	if st := deviceStatus(t, claimName, n.driver, "dev-0"); st == nil || st.NetworkData == nil {
		t.Fatalf("claim status not written as devplumb: %+v", st)
	}
	if res := n.run("DEL", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("DEL as devplumb: %+v", res)
	}
	if st := deviceStatus(t, claimName, n.driver, "dev-0"); st != nil {
		t.Fatalf("claim status left by DEL as devplumb: %+v", st)
	}
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	// resourceslices watch: the node agent's informer of its node's slices.
	want := map[string]bool{"resourceclaims/get": true, "resourceslices/list": true, "resourceslices/watch": true,
		"resourceclaims/status/patch": true}
	for _, r := range []struct{ resource, sub string }{
		{"resourceclaims", ""}, {"resourceclaims", "status"}, {"resourceslices", ""}, {"deviceclasses", ""},
		{"resourceclaimtemplates", ""},
	} {
		for _, v := range verbs {
			key := r.resource + "/" + v
			if r.sub != "" {
				key = r.resource + "/" + r.sub + "/" + v
			}
			if got := cniAllowed(t, v, r.resource, r.sub); got != want[key] {
				t.Errorf("%s: allowed=%v, want %v", key, got, want[key])
			}
		}
	}
	// The per-driver right (1.36+) only on its own node, never from an arbitrary one.
	for verb, want := range map[string]bool{"associated-node:patch": true, "arbitrary-node:patch": false,
		"associated-node:update": false, "patch": false} {
		if got := cniAllowed(t, verb, "resourceclaims", "driver"); got != want {
			t.Errorf("resourceclaims/driver %s: allowed=%v, want %v", verb, got, want)
		}
	}
}

func cniAllowed(t *testing.T, verb, resource, sub string) bool {
	t.Helper()
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: kubeapi.DevplumbUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"},
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: cniNS, Verb: verb, Group: "resource.k8s.io",
			Resource: resource, Subresource: sub},
	}}
	got, err := srv.Client.AuthorizationV1().SubjectAccessReviews().Create(e2etest.Ctx(t), sar, metav1.CreateOptions{})
	e2etest.Must(t, err)
	return got.Status.Allowed
}

// applyCNIRBAC creates the objects of deployments/rbac.yaml as they are,
// waits until the authorizer grants them, and deletes them at the end.
func applyCNIRBAC(t *testing.T) {
	t.Helper()
	objs, err := e2etest.Objects(filepath.Join(testenv.ModuleRoot(), "deployments", "rbac.yaml"))
	e2etest.Must(t, err)
	// The fourth document, devplumb-metrics-auth, is the metrics container's (TokenReview,
	// SubjectAccessReview), not the CNI's: go test ./deployments checks it.
	kinds := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding"}
	if len(objs) != 4 || objs[0].GetKind() != kinds[0] || objs[1].GetKind() != kinds[1] || objs[2].GetKind() != kinds[2] ||
		objs[3].GetName() != "devplumb-metrics-auth" {
		t.Fatalf("rbac.yaml has %d documents, want ServiceAccount, ClusterRole, ClusterRoleBinding and devplumb-metrics-auth", len(objs))
	}
	m, err := e2etest.NewManifests(srv.Config)
	e2etest.Must(t, err)
	strict := metav1.CreateOptions{FieldValidation: "Strict"}
	if err := m.Create(e2etest.Ctx(t), objs[0], strict); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Delete(e2etest.Ctx(t), objs[0]) })
	grantUntilEnd(t, "the shipped RBAC", [3]string{"patch", "resourceclaims", "status"}, func(ctx context.Context, create bool) error {
		if !create {
			_ = m.Delete(ctx, objs[2])
			_ = m.Delete(ctx, objs[1])
			return nil
		}
		if err := m.Create(ctx, objs[1], strict); err != nil {
			return err
		}
		return m.Create(ctx, objs[2], strict)
	})
}

// grantUntilEnd grants devplumb's service account what bind(ctx, true) creates, and
// calls bind(ctx, false) to take it back when the test ends. Each way it waits until the
// authorizer has seen it: devplumb may do granted (verb, resource, subresource) in
// cniNS, and at the end no longer get resourceclaims.
func grantUntilEnd(t *testing.T, what string, granted [3]string, bind func(ctx context.Context, create bool) error) {
	t.Helper()
	e2etest.Must(t, bind(e2etest.Ctx(t), true))
	t.Cleanup(func() {
		e2etest.Must(t, bind(e2etest.Ctx(t), false))
		waitAllowed(t, false, "get", "resourceclaims", "", "the authorizer still grants "+what+" a minute after it was deleted")
	})
	// The RBAC authorizer sees new bindings through its informers.
	waitAllowed(t, true, granted[0], granted[1], granted[2], "the authorizer does not grant "+what+" within a minute")
}

// waitAllowed waits up to a minute for cniAllowed(verb, resource, sub) to be want.
func waitAllowed(t *testing.T, want bool, verb, resource, sub, failure string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for cniAllowed(t, verb, resource, sub) != want {
		if time.Now().After(deadline) {
			t.Fatal(failure)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A claim status devplumb may not write fails ADD under "networkStatus":
// "required" (the default), leaving nothing on the pod, and rolls back;
// under "best-effort" ADD succeeds with the network-status entry alone.
func TestCNIClaimStatusRequiredOrBestEffort(t *testing.T) {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list"}},
	}
	bindCNIRole(t, "cni-no-claim-status", rules)
	n := newCNINode(t)
	a := n.claimADD(n.devplumbKubeconfig())
	dev, pod, claimName, conf, netns := a.dev, a.pod, a.claim, a.conf, a.netns
	if res := a.res; res.Code != 106 || !strings.Contains(res.Msg, "writing the status of ResourceClaim default/"+claimName) ||
		!strings.Contains(res.Details, "forbidden") {
		t.Fatalf("required ADD without claim status rights: %+v", res)
	}
	n.nothingWritten(pod, claimName, dev)

	conf["networkStatus"] = "best-effort"
	if res := n.run("ADD", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("best-effort ADD: %+v", res)
	}
	if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name); len(ns) != 1 || ns[0].Interface != "net1" {
		t.Errorf("best-effort ADD: network-status %+v", ns)
	}
	if st := deviceStatus(t, claimName, n.driver, "dev-0"); st != nil {
		t.Errorf("claim status written without the right: %+v", st)
	}
	if res := n.run("DEL", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("DEL: %+v", res)
	}
	if !onHost(dev) {
		t.Errorf("device not back after DEL")
	}
}

// bindCNIRole gives devplumb's service account a ClusterRole of rules until
// the test ends, waiting for the authorizer both ways.
func bindCNIRole(t *testing.T, name string, rules []rbacv1.PolicyRule) {
	t.Helper()
	rbac := srv.Client.RbacV1()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "devplumb", Namespace: "kube-system"}}}
	grantUntilEnd(t, "the role", [3]string{"get", "resourceclaims", ""}, func(ctx context.Context, create bool) error {
		if !create {
			_ = rbac.ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
			_ = rbac.ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
			return nil
		}
		if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
		return err
	})
}
