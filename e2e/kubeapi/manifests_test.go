package kubeapi_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestManifestsAcceptedByAPIServer creates every object of deployments/ with a server-side
// dry run: the real API server's defaulting, validation and admission accept them all.
func TestManifestsAcceptedByAPIServer(t *testing.T) {
	must(t, srv.InstallNADCRD(ctx(t)))
	root := filepath.Join(testenv.ModuleRoot(), "deployments")
	files, _ := filepath.Glob(filepath.Join(root, "*.yaml"))
	// kustomization.yaml is kustomize's input, not an object (deployments' own test builds it).
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "kustomization.yaml" })
	nads, _ := filepath.Glob(filepath.Join(root, "nads", "*.yaml"))
	n := 0
	for _, f := range append(files, nads...) {
		for i, obj := range objects(t, f) {
			err := createObject(t, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
			if err != nil && !apierrors.IsAlreadyExists(err) { // exists: validated and stored by another test
				t.Errorf("%s #%d (%s %s): %v", f, i, obj.GetKind(), obj.GetName(), err)
			}
			n++
		}
	}
	if n < 10 {
		t.Fatalf("only %d objects in deployments/", n)
	}
	t.Logf("%d objects accepted", n)
}

// createObject creates obj on the test server, whatever its kind, with opts.
func createObject(t *testing.T, obj *unstructured.Unstructured, opts metav1.CreateOptions) error {
	t.Helper()
	ri, err := resourceFor(t, obj)
	if err != nil {
		return err
	}
	_, err = ri.Create(ctx(t), obj, opts)
	return err
}

// resourceFor is the dynamic client for obj's kind and namespace.
func resourceFor(t *testing.T, obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(srv.Config)
	must(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(srv.Config)
	must(t, err)
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s not served: %w", gvk, err)
	}
	if ns := obj.GetNamespace(); ns != "" {
		return dyn.Resource(m.Resource).Namespace(ns), nil
	}
	return dyn.Resource(m.Resource), nil
}

func objects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		must(t, err)
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}
