package kubeapi_test

import (
	"path/filepath"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestManifestsAcceptedByAPIServer creates every object of deployments/ with a server-side
// dry run: the real API server's defaulting, validation and admission accept them all.
func TestManifestsAcceptedByAPIServer(t *testing.T) {
	e2etest.Must(t, srv.InstallNADCRD(e2etest.Ctx(t)))
	root := filepath.Join(testenv.ModuleRoot(), "deployments")
	files, _ := filepath.Glob(filepath.Join(root, "*.yaml"))
	// kustomization.yaml is kustomize's input, not an object (deployments' own test builds it).
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "kustomization.yaml" })
	nads, _ := filepath.Glob(filepath.Join(root, "nads", "*.yaml"))
	c, n := manifests(t), 0
	for _, f := range append(files, nads...) {
		for i, obj := range objects(t, f) {
			err := c.Create(e2etest.Ctx(t), obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
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

// manifests is the manifest client of the test server.
func manifests(t *testing.T) *e2etest.Manifests {
	t.Helper()
	c, err := e2etest.NewManifests(srv.Config)
	e2etest.Must(t, err)
	return c
}

// objects reads every object of a manifest file.
func objects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := e2etest.Objects(path)
	e2etest.Must(t, err)
	return objs
}
