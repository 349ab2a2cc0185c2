package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// Objects reads every object of a YAML manifest file.
func Objects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("node: %s: %w", path, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("node: %s: %w", path, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// Apply creates the objects of the manifest files, or replaces them when they exist: what
// `kubectl apply -f` does for a first apply. The objects go as they are in the files.
func (n *Node) Apply(ctx context.Context, files ...string) error {
	mapper, dyn, err := n.dynamicClient()
	if err != nil {
		return err
	}
	for _, f := range files {
		objs, err := Objects(f)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if err := applyOne(ctx, mapper, dyn, obj); err != nil {
				return fmt.Errorf("node: apply %s: %s %s: %w", f, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}

func (n *Node) dynamicClient() (*restmapper.DeferredDiscoveryRESTMapper, dynamic.Interface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(n.API.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("node: %w", err)
	}
	dyn, err := dynamic.NewForConfig(n.API.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("node: %w", err)
	}
	return restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), dyn, nil
}

// resourceOf is the client of obj's resource (in obj's namespace, if it has one).
func resourceOf(mapper *restmapper.DeferredDiscoveryRESTMapper, dyn dynamic.Interface, obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if ns := obj.GetNamespace(); ns != "" {
		return dyn.Resource(m.Resource).Namespace(ns), nil
	}
	return dyn.Resource(m.Resource), nil
}

func applyOne(ctx context.Context, mapper *restmapper.DeferredDiscoveryRESTMapper, dyn dynamic.Interface, obj *unstructured.Unstructured) error {
	ri, err := resourceOf(mapper, dyn, obj)
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

// Delete deletes the objects of the manifest files, last first; objects already gone are
// fine. What they own goes with them (background propagation, as `kubectl delete -f`).
func (n *Node) Delete(ctx context.Context, files ...string) error {
	mapper, dyn, err := n.dynamicClient()
	if err != nil {
		return err
	}
	for i := len(files) - 1; i >= 0; i-- {
		objs, err := Objects(files[i])
		if err != nil {
			return err
		}
		for j := len(objs) - 1; j >= 0; j-- {
			ri, err := resourceOf(mapper, dyn, objs[j])
			if err == nil {
				err = ri.Delete(ctx, objs[j].GetName(), metav1.DeleteOptions{})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("node: delete %s: %s %s: %w", files[i], objs[j].GetKind(), objs[j].GetName(), err)
			}
		}
	}
	return nil
}
