package dra_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

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
	kc := filepath.Join(n.dir, "devplumb.kubeconfig")
	e2etest.Must(t, os.WriteFile(kc, []byte(kubeapi.Kubeconfig(srv.URL, srv.DevplumbToken)), 0o600))
	dev := n.veth()
	n.slice(cniDev{"dev-0", attrs(dev, cniResource)})
	claimName := "claim-" + cniRandom()
	pod := n.pod("pod-"+cniRandom(), claimName, true)
	n.claim(claimName, pod, []*corev1.Pod{pod}, "dev-0")
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
	want := map[string]bool{"resourceclaims/get": true, "resourceslices/list": true, "resourceclaims/status/patch": true}
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
	raw, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "deployments", "rbac.yaml"))
	e2etest.Must(t, err)
	docs := bytes.Split(raw, []byte("\n---\n"))
	if len(docs) != 3 {
		t.Fatalf("rbac.yaml has %d documents, want ServiceAccount, ClusterRole, ClusterRoleBinding", len(docs))
	}
	var sa corev1.ServiceAccount
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	for i, obj := range []any{&sa, &role, &binding} {
		e2etest.Must(t, yaml.UnmarshalStrict(docs[i], obj))
	}
	c := srv.Client
	_, err = c.CoreV1().ServiceAccounts(sa.Namespace).Create(e2etest.Ctx(t), &sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = c.RbacV1().ClusterRoles().Create(e2etest.Ctx(t), &role, metav1.CreateOptions{})
	e2etest.Must(t, err)
	_, err = c.RbacV1().ClusterRoleBindings().Create(e2etest.Ctx(t), &binding, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(e2etest.Ctx(t), binding.Name, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(e2etest.Ctx(t), role.Name, metav1.DeleteOptions{})
		_ = c.CoreV1().ServiceAccounts(sa.Namespace).Delete(e2etest.Ctx(t), sa.Name, metav1.DeleteOptions{})
		deadline := time.Now().Add(time.Minute)
		for cniAllowed(t, "get", "resourceclaims", "") {
			if time.Now().After(deadline) {
				t.Fatal("the authorizer still grants devplumb resourceclaims/get a minute after the RBAC was deleted")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	// The RBAC authorizer sees new bindings through its informers.
	deadline := time.Now().Add(time.Minute)
	for !cniAllowed(t, "patch", "resourceclaims", "status") {
		if time.Now().After(deadline) {
			t.Fatal("the authorizer does not grant the shipped RBAC within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A claim status devplumb may not write fails ADD under "networkStatus":
// "required" (the default), before anything is on the pod, and rolls back;
// under "best-effort" ADD succeeds with the network-status entry alone.
func TestCNIClaimStatusRequiredOrBestEffort(t *testing.T) {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list"}},
	}
	bindCNIRole(t, "cni-no-claim-status", rules)
	n := newCNINode(t)
	kc := filepath.Join(n.dir, "devplumb.kubeconfig")
	e2etest.Must(t, os.WriteFile(kc, []byte(kubeapi.Kubeconfig(srv.URL, srv.DevplumbToken)), 0o600))
	dev := n.veth()
	n.slice(cniDev{"dev-0", attrs(dev, cniResource)})
	claimName := "claim-" + cniRandom()
	pod := n.pod("pod-"+cniRandom(), claimName, false)
	n.claim(claimName, nil, []*corev1.Pod{pod}, "dev-0")
	conf := n.conf(map[string]any{"resourceClaim": "net", "kubeconfig": kc})
	netns := testenv.NetNS(t).Path()

	res := n.run("ADD", conf, netns, pod, "net1")
	if res.Code != 106 || !strings.Contains(res.Msg, "writing the status of ResourceClaim default/"+claimName) ||
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
	c := srv.Client
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "devplumb", Namespace: "kube-system"}}}
	_, err := c.RbacV1().ClusterRoles().Create(e2etest.Ctx(t), role, metav1.CreateOptions{})
	e2etest.Must(t, err)
	_, err = c.RbacV1().ClusterRoleBindings().Create(e2etest.Ctx(t), binding, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(e2etest.Ctx(t), name, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(e2etest.Ctx(t), name, metav1.DeleteOptions{})
		deadline := time.Now().Add(time.Minute)
		for cniAllowed(t, "get", "resourceclaims", "") {
			if time.Now().After(deadline) {
				t.Fatal("the authorizer still grants the role a minute after it was deleted")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for !cniAllowed(t, "get", "resourceclaims", "") {
		if time.Now().After(deadline) {
			t.Fatal("the authorizer does not grant the role within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
