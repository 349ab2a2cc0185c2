package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

type clients struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func connect(kubeconfig string) (*clients, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &clients{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// resource is the client of obj's kind, in its namespace when the kind has one.
func (c *clients) resource(gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, error) {
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
	}
	if m.Scope.Name() == "namespace" {
		if namespace == "" {
			namespace = "default"
		}
		return c.dyn.Resource(m.Resource).Namespace(namespace), nil
	}
	return c.dyn.Resource(m.Resource), nil
}

// apply server-side applies every document of the files, as kubectl apply
// --server-side does.
func apply(ctx context.Context, kubeconfig string, files []string) error {
	c, err := connect(kubeconfig)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := applyFile(ctx, c, f); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	return nil
}

func applyFile(ctx context.Context, c *clients, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if len(obj.Object) == 0 {
			continue
		}
		r, err := c.resource(obj.GroupVersionKind(), obj.GetNamespace())
		if err != nil {
			return err
		}
		body, err := json.Marshal(obj.Object)
		if err != nil {
			return err
		}
		force := true
		if _, err := r.Patch(ctx, obj.GetName(), types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "devplumb-demo", Force: &force}); err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		fmt.Printf("%s/%s applied\n", strings.ToLower(obj.GetKind()), obj.GetName())
	}
}

// get prints the object (resource as kubectl names it: pods, resourceclaims, ...) or
// the value at a dot-separated field path (list items by index: a.0.b): a string as it
// is, anything else as indented JSON.
func get(ctx context.Context, kubeconfig, resource, namespace, name string, field []string) error {
	r, err := resourceNamed(kubeconfig, resource, namespace)
	if err != nil {
		return err
	}
	obj, err := r.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return printField(obj.Object, field)
}

// list prints every object of the resource (or the field of each) as get does.
func list(ctx context.Context, kubeconfig, resource, namespace string, field []string) error {
	r, err := resourceNamed(kubeconfig, resource, namespace)
	if err != nil {
		return err
	}
	objs, err := r.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, o := range objs.Items {
		if err := printField(o.Object, field); err != nil {
			return err
		}
	}
	return nil
}

func resourceNamed(kubeconfig, resource, namespace string) (dynamic.ResourceInterface, error) {
	c, err := connect(kubeconfig)
	if err != nil {
		return nil, err
	}
	gvr, err := c.mapper.ResourceFor(schema.GroupVersionResource{Resource: resource})
	if err != nil {
		return nil, fmt.Errorf("resource %q: %w", resource, err)
	}
	if namespace != "" {
		return c.dyn.Resource(gvr).Namespace(namespace), nil
	}
	return c.dyn.Resource(gvr), nil
}

func printField(obj map[string]any, field []string) error {
	var v any = obj
	if len(field) == 1 {
		var err error
		if v, err = fieldAt(v, strings.Split(field[0], ".")); err != nil {
			return err
		}
	}
	if s, ok := v.(string); ok {
		fmt.Println(s)
		return nil
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// fieldAt walks path through maps (by key) and lists (by index); a missing field is null.
func fieldAt(v any, path []string) (any, error) {
	for i, p := range path {
		switch t := v.(type) {
		case map[string]any:
			v = t[p]
		case []any:
			n, err := strconv.Atoi(p)
			if err != nil || n < 0 || n >= len(t) {
				return nil, fmt.Errorf("%s: no item %q in a list of %d", strings.Join(path[:i+1], "."), p, len(t))
			}
			v = t[n]
		default:
			return nil, nil
		}
	}
	return v, nil
}
