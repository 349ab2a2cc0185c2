package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devplumb/devplumb/e2e/e2etest"
)

// connect is the manifest client of the API server kubeconfig names.
func connect(kubeconfig string) (*e2etest.Manifests, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return e2etest.NewManifests(cfg)
}

// apply server-side applies every document of the files, as kubectl apply
// --server-side does.
func apply(ctx context.Context, kubeconfig string, files []string) error {
	c, err := connect(kubeconfig)
	if err != nil {
		return err
	}
	for _, f := range files {
		objs, err := e2etest.Objects(f)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if err := c.ServerSideApply(ctx, obj, "devplumb-demo"); err != nil {
				return fmt.Errorf("%s: %s %s: %w", f, obj.GetKind(), obj.GetName(), err)
			}
			fmt.Printf("%s/%s applied\n", strings.ToLower(obj.GetKind()), obj.GetName())
		}
	}
	return nil
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
	gvr, err := c.Mapper.ResourceFor(schema.GroupVersionResource{Resource: resource})
	if err != nil {
		return nil, fmt.Errorf("resource %q: %w", resource, err)
	}
	if namespace != "" {
		return c.Dyn.Resource(gvr).Namespace(namespace), nil
	}
	return c.Dyn.Resource(gvr), nil
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
