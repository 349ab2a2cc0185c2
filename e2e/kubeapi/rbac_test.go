package kubeapi_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestShippedRBACIsEnoughAndNoMore: with deployments/rbac.yaml applied, the devplumb
// service account can do everything devplumb does (read a NAD, write and remove its
// network-status entry, record an Event on the pod) and is refused what devplumb never needs.
func TestShippedRBACIsEnoughAndNoMore(t *testing.T) {
	e2etest.Must(t, srv.InstallNADCRD(e2etest.Ctx(t)))
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "rbac", nodeName, annotationWith(t, otherEntry))
	e2etest.Must(t, err)
	_, err = srv.CreateNAD(e2etest.Ctx(t), "default", "rbac-net", `{"cniVersion":"1.0.0","name":"rbac-net","type":"devplumb"}`,
		map[string]string{kube.ResourceNameAnnot: "example.com/vf"})
	e2etest.Must(t, err)
	cfg := filepath.Join(t.TempDir(), "devplumb.kubeconfig")
	e2etest.Must(t, os.WriteFile(cfg, []byte(kubeapi.Kubeconfig(srv.URL, srv.DevplumbToken)), 0o600))
	c, err := kube.New(cfg, 10*time.Second, nil)
	e2etest.Must(t, err)
	entry := pciEntry("default/rbac-net", "net1", "0000:18:02.5")

	// Before the RBAC exists the identity may do nothing: the error is final, not retried.
	err = c.SetNetworkStatus(e2etest.Ctx(t), "default", pod.Name, string(pod.UID), entry)
	if !isForbidden(err) {
		t.Fatalf("without RBAC: got %v, want Forbidden", err)
	}

	applyRBAC(t)
	// The RBAC authorizer sees new bindings through its informers: wait for the grant.
	waitFor(t, "NAD get with the shipped RBAC", func() error {
		_, err := c.NADResourceName(e2etest.Ctx(t), "default", "rbac-net")
		return err
	})
	e2etest.Must(t, c.SetNetworkStatus(e2etest.Ctx(t), "default", pod.Name, string(pod.UID), entry))
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, "default", pod.Name), otherEntry, entry)
	e2etest.Must(t, c.RemoveNetworkStatus(e2etest.Ctx(t), "default", pod.Name, string(pod.UID), entry.Name, entry.Interface))
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, "default", pod.Name), otherEntry)
	e2etest.Must(t, c.RecordPodEvent(e2etest.Ctx(t), kube.PodEvent{Namespace: "default", Name: pod.Name,
		UID: string(pod.UID), Warning: true, Reason: kube.ReasonAttachmentFailed, Note: "rbac test"}))

	// No more than that.
	rc, err := clientcmd.BuildConfigFromFlags("", cfg)
	e2etest.Must(t, err)
	as, err := kubernetes.NewForConfig(rc)
	e2etest.Must(t, err)
	_, err = as.CoreV1().Nodes().List(e2etest.Ctx(t), metav1.ListOptions{})
	wantForbidden(t, "list nodes", err)
	p, err := srv.Client.CoreV1().Pods("default").Get(e2etest.Ctx(t), pod.Name, metav1.GetOptions{})
	e2etest.Must(t, err)
	_, err = as.CoreV1().Pods("default").Update(e2etest.Ctx(t), p, metav1.UpdateOptions{})
	wantForbidden(t, "update pod", err)
	_, err = as.CoreV1().Pods("default").UpdateStatus(e2etest.Ctx(t), p, metav1.UpdateOptions{})
	wantForbidden(t, "update pod status", err)
	_, err = as.CoreV1().Secrets("kube-system").List(e2etest.Ctx(t), metav1.ListOptions{})
	wantForbidden(t, "list secrets", err)
	err = as.CoreV1().Pods("default").Delete(e2etest.Ctx(t), pod.Name, metav1.DeleteOptions{})
	wantForbidden(t, "delete pod", err)
	accessMatrix(t)
}

// accessMatrix asks the API server's authorizer about every verb on the resources a
// node-level plugin could be tempted to touch: exactly get/patch pods, get NADs, list and
// watch both (the node agent's informers), and create events.k8s.io Events are allowed, in
// any namespace, and nothing else.
func accessMatrix(t *testing.T) {
	t.Helper()
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	resources := []struct{ group, resource, sub string }{
		{"", "pods", ""}, {"", "pods", "status"}, {"", "pods", "exec"}, {"", "pods", "eviction"},
		{"", "nodes", ""}, {"", "secrets", ""}, {"", "configmaps", ""}, {"", "serviceaccounts", "token"},
		{"", "events", ""}, {"events.k8s.io", "events", ""}, {"k8s.cni.cncf.io", "network-attachment-definitions", ""},
		{"rbac.authorization.k8s.io", "clusterrolebindings", ""},
	}
	// Keyed by group too: core events stay refused, events.k8s.io events may be created.
	want := map[string]bool{"/pods/get": true, "/pods/list": true, "/pods/watch": true, "/pods/patch": true,
		"k8s.cni.cncf.io/network-attachment-definitions/get": true, "k8s.cni.cncf.io/network-attachment-definitions/list": true,
		"k8s.cni.cncf.io/network-attachment-definitions/watch": true, "events.k8s.io/events/create": true}
	for _, ns := range []string{"default", "kube-system"} {
		for _, r := range resources {
			for _, v := range verbs {
				key := r.group + "/" + r.resource + "/" + v
				if r.sub != "" {
					key = r.group + "/" + r.resource + "/" + r.sub + "/" + v
				}
				got := allowed(t, ns, v, r.group, r.resource, r.sub)
				if got != want[key] {
					t.Errorf("%s in %s: allowed=%v, want %v", key, ns, got, want[key])
				}
			}
		}
	}
}

// allowed asks the API server's authorizer whether devplumb's service account may do verb.
func allowed(t *testing.T, ns, verb, group, resource, sub string) bool {
	t.Helper()
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: kubeapi.DevplumbUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"},
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group,
			Resource: resource, Subresource: sub},
	}}
	got, err := srv.Client.AuthorizationV1().SubjectAccessReviews().Create(e2etest.Ctx(t), sar, metav1.CreateOptions{})
	e2etest.Must(t, err)
	return got.Status.Allowed
}

func isForbidden(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if apierrors.IsForbidden(e) {
			return true
		}
	}
	return false
}

func wantForbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s as devplumb: got %v, want Forbidden", what, err)
	}
}

// applyRBAC creates the objects of deployments/rbac.yaml as they are, and removes them
// when the test ends, waiting until the authorizer has seen it: a run after this one (go
// test -count=N) starts without the grant again.
func applyRBAC(t *testing.T) {
	t.Helper()
	objs := objects(t, filepath.Join(testenv.ModuleRoot(), "deployments", "rbac.yaml"))
	c := manifests(t)
	for _, obj := range objs {
		e2etest.Must(t, c.Create(e2etest.Ctx(t), obj, metav1.CreateOptions{}))
	}
	t.Cleanup(func() {
		for _, obj := range objs {
			if err := c.Delete(e2etest.Ctx(t), obj); err != nil {
				t.Error(err)
			}
		}
		waitFor(t, "the authorizer to stop granting devplumb pods/get once the RBAC is deleted", func() error {
			if allowed(t, "default", "get", "", "pods", "") {
				return errors.New("still granted")
			}
			return nil
		})
	})
}
