package e2etest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// Objects reads every object of a YAML manifest file (empty documents skipped).
func Objects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// Manifests sends manifest objects, of any kind the server serves, to an API
// server: as they are (Create, CreateOrReplace, Delete) or server-side applied.
type Manifests struct {
	Mapper *restmapper.DeferredDiscoveryRESTMapper
	Dyn    dynamic.Interface
}

// NewManifests connects to the API server of cfg.
func NewManifests(cfg *rest.Config) (*Manifests, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return &Manifests{Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), Dyn: dyn}, nil
}

// Resource is the client of obj's kind, in obj's namespace when the kind has
// one ("default" when obj names none, as kubectl does).
func (c *Manifests) Resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s not served: %w", gvk, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return c.Dyn.Resource(m.Resource), nil
	}
	ns := obj.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return c.Dyn.Resource(m.Resource).Namespace(ns), nil
}

// Create creates obj with opts.
func (c *Manifests) Create(ctx context.Context, obj *unstructured.Unstructured, opts metav1.CreateOptions) error {
	ri, err := c.Resource(obj)
	if err != nil {
		return err
	}
	_, err = ri.Create(ctx, obj, opts)
	return err
}

// CreateOrReplace creates obj, or replaces it when it exists: what `kubectl apply -f`
// does for a first apply. Fields are validated strictly.
func (c *Manifests) CreateOrReplace(ctx context.Context, obj *unstructured.Unstructured) error {
	ri, err := c.Resource(obj)
	if err != nil {
		return err
	}
	_, err = ri.Create(ctx, obj, metav1.CreateOptions{FieldValidation: "Strict"})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		obj.SetResourceVersion(cur.GetResourceVersion())
		_, err = ri.Update(ctx, obj, metav1.UpdateOptions{FieldValidation: "Strict"})
	}
	return err
}

// ServerSideApply applies obj as manager, taking over conflicting fields, as
// `kubectl apply --server-side --force-conflicts` does.
func (c *Manifests) ServerSideApply(ctx context.Context, obj *unstructured.Unstructured, manager string) error {
	ri, err := c.Resource(obj)
	if err != nil {
		return err
	}
	body, err := json.Marshal(obj.Object)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	force := true
	_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: manager, Force: &force})
	return err
}

// Delete deletes obj; one already gone is fine. What it owns goes with it
// (background propagation, as `kubectl delete` does).
func (c *Manifests) Delete(ctx context.Context, obj *unstructured.Unstructured) error {
	ri, err := c.Resource(obj)
	if err == nil {
		err = ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
