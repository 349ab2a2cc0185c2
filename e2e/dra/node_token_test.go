package dra_test

import (
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// saMountPath is where a pod's service account token is mounted, and where the devplumb
// installer (images/devplumb/install.sh, SA_DIR) and client-go's in-cluster config read it.
const saMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// podBoundToken creates, on node, the pod that the DaemonSet of deployments/<dsFile> runs
// there, checks that the API server (ServiceAccount admission) gives its first container
// a projected service account token at saMountPath, and returns the token the kubelet
// would put there: a TokenRequest for the pod's service account bound to that pod, which
// the API server marks with the pod's node (user extra authentication.kubernetes.io/node-name).
// That is what devplumb's kubeconfig carries on a real node, and netdev-dp's client.
func podBoundToken(t *testing.T, dsFile, node string) string {
	t.Helper()
	ds := shippedDaemonSet(t, dsFile)
	sa := ds.Spec.Template.Spec.ServiceAccountName
	ensureServiceAccount(t, ds.Namespace, sa)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: ds.Name + "-" + node,
		Labels: ds.Spec.Template.Labels}, Spec: *ds.Spec.Template.Spec.DeepCopy()}
	pod.Spec.NodeName = node
	pods := srv.Client.CoreV1().Pods(ds.Namespace)
	e2etest.Must(t, srv.DeletePod(e2etest.Ctx(t), ds.Namespace, pod.Name))
	pod, err := pods.Create(e2etest.Ctx(t), pod, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { _ = srv.DeletePod(e2etest.Ctx(t), pod.Namespace, pod.Name) })
	proj := projectedToken(t, pod)
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: proj.ExpirationSeconds,
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
	if proj.Audience != "" {
		tr.Spec.Audiences = []string{proj.Audience}
	}
	out, err := srv.Client.CoreV1().ServiceAccounts(ds.Namespace).CreateToken(e2etest.Ctx(t), sa, tr, metav1.CreateOptions{})
	e2etest.Must(t, err)
	return out.Status.Token
}

// projectedToken is the service account token projection mounted at saMountPath in the
// pod's first container.
func projectedToken(t *testing.T, pod *corev1.Pod) *corev1.ServiceAccountTokenProjection {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if v, ok := vols[m.Name]; ok && m.MountPath == saMountPath && v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil && src.ServiceAccountToken.Path == "token" {
					return src.ServiceAccountToken
				}
			}
		}
	}
	t.Fatalf("pod %s/%s: no projected service account token at %s in container %s: %+v",
		pod.Namespace, pod.Name, saMountPath, pod.Spec.Containers[0].Name, pod.Spec.Volumes)
	return nil
}

func shippedDaemonSet(t *testing.T, file string) *appsv1.DaemonSet {
	t.Helper()
	objs, err := e2etest.Objects(filepath.Join(testenv.ModuleRoot(), "deployments", file))
	e2etest.Must(t, err)
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			ds := &appsv1.DaemonSet{}
			e2etest.Must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ds))
			return ds
		}
	}
	t.Fatalf("deployments/%s: no DaemonSet", file)
	return nil
}

// ensureServiceAccount creates the service account unless it exists (the test's shipped
// manifests may have made it), and deletes what it created when the test ends.
func ensureServiceAccount(t *testing.T, namespace, name string) {
	t.Helper()
	sas := srv.Client.CoreV1().ServiceAccounts(namespace)
	_, err := sas.Create(e2etest.Ctx(t), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return
	}
	e2etest.Must(t, err)
	t.Cleanup(func() { _ = sas.Delete(e2etest.Ctx(t), name, metav1.DeleteOptions{}) })
}
