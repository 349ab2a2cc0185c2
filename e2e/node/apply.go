package node

import (
	"context"
	"fmt"

	"github.com/devplumb/devplumb/e2e/e2etest"
)

// Apply creates the objects of the manifest files, or replaces them when they exist: what
// `kubectl apply -f` does for a first apply. The objects go as they are in the files.
func (n *Node) Apply(ctx context.Context, files ...string) error {
	c, err := e2etest.NewManifests(n.API.Config)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	for _, f := range files {
		objs, err := e2etest.Objects(f)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		for _, obj := range objs {
			if err := c.CreateOrReplace(ctx, obj); err != nil {
				return fmt.Errorf("node: apply %s: %s %s: %w", f, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}

// Delete deletes the objects of the manifest files, last first; objects already gone are
// fine. What they own goes with them (background propagation, as `kubectl delete -f`).
func (n *Node) Delete(ctx context.Context, files ...string) error {
	c, err := e2etest.NewManifests(n.API.Config)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	for i := len(files) - 1; i >= 0; i-- {
		objs, err := e2etest.Objects(files[i])
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		for j := len(objs) - 1; j >= 0; j-- {
			if err := c.Delete(ctx, objs[j]); err != nil {
				return fmt.Errorf("node: delete %s: %s %s: %w", files[i], objs[j].GetKind(), objs[j].GetName(), err)
			}
		}
	}
	return nil
}
