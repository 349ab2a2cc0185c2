package kubeapi

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

//go:embed nad-crd.yaml
var nadCRD []byte

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallNADCRD creates the NetworkAttachmentDefinition CRD (if missing) and waits until
// NADs can be created and listed.
func (s *Server) InstallNADCRD(ctx context.Context) error {
	var obj map[string]any
	if err := yaml.Unmarshal(nadCRD, &obj); err != nil {
		return fmt.Errorf("kubeapi: NAD CRD: %w", err)
	}
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		return fmt.Errorf("kubeapi: %w", err)
	}
	_, err = dyn.Resource(crdGVR).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubeapi: create NAD CRD: %w", err)
	}
	nc, err := s.NADClient()
	if err != nil {
		return err
	}
	// The CRD is served once it is Established; listing NADs proves it end to end.
	ctx, cancel := context.WithTimeout(ctx, readyBound)
	defer cancel()
	for {
		_, err = nc.K8sCniCncfIoV1().NetworkAttachmentDefinitions("default").List(ctx, metav1.ListOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubeapi: NAD CRD not served within %s: %w", readyBound, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NADClient is the NAD client's clientset for this server.
func (s *Server) NADClient() (nadclient.Interface, error) {
	nc, err := nadclient.NewForConfig(s.Config)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: NAD client: %w", err)
	}
	return nc, nil
}

// CreateNAD creates a NetworkAttachmentDefinition with config and annotations.
func (s *Server) CreateNAD(ctx context.Context, namespace, name, config string, annotations map[string]string) (*nadv1.NetworkAttachmentDefinition, error) {
	nc, err := s.NADClient()
	if err != nil {
		return nil, err
	}
	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: annotations},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: config},
	}
	nads := nc.K8sCniCncfIoV1().NetworkAttachmentDefinitions(namespace)
	out, err := nads.Create(ctx, nad, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) { // left by an earlier run (go test -count=N)
		if err = nads.Delete(ctx, name, metav1.DeleteOptions{}); err == nil || apierrors.IsNotFound(err) {
			out, err = nads.Create(ctx, nad, metav1.CreateOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kubeapi: create NAD %s/%s: %w", namespace, name, err)
	}
	return out, nil
}

// CreatePod creates a pod bound to node (no scheduler, no kubelet: it stays Pending,
// which is all CNI-side tests need) with annotations. A pod of that name left by an
// earlier run of the same test (go test -count=N) is deleted first.
func (s *Server) CreatePod(ctx context.Context, namespace, name, node string, annotations map[string]string) (*corev1.Pod, error) {
	if err := s.DeletePod(ctx, namespace, name); err != nil {
		return nil, err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "busybox", ImagePullPolicy: corev1.PullNever}},
		},
	}
	out, err := s.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubeapi: create pod %s/%s: %w", namespace, name, err)
	}
	return out, nil
}

// DeletePod deletes a pod at once (grace period 0) and waits until it is gone.
func (s *Server) DeletePod(ctx context.Context, namespace, name string) error {
	zero := int64(0)
	err := s.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubeapi: delete pod %s/%s: %w", namespace, name, err)
	}
	for {
		_, err := s.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubeapi: pod %s/%s still there: %w", namespace, name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CreateNamespace creates namespace unless it exists.
func (s *Server) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_, err := s.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubeapi: create namespace %s: %w", name, err)
	}
	return s.defaultServiceAccounts(ctx, name)
}

// defaultServiceAccounts makes the "default" ServiceAccount of each namespace, as
// kube-controller-manager would, unless one runs (Options.ServiceAccounts): the
// ServiceAccount admission plugin refuses pods without their service account.
func (s *Server) defaultServiceAccounts(ctx context.Context, namespaces ...string) error {
	if s.opts.ServiceAccounts {
		return nil
	}
	for _, ns := range namespaces {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}
		_, err := s.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubeapi: service account %s/default: %w", ns, err)
		}
	}
	return nil
}
