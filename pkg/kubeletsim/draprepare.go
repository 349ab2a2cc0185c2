package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/devplumb/devplumb/pkg/kubeletsim/dracluster"
	"github.com/devplumb/devplumb/pkg/kubeletsim/draplugin"
)

// prepareClaims does the kubelet DRA manager's PrepareResources: a check pass
// (every driver registered, no stale claim of the same name) before any call,
// then NodePrepareResources once per driver for the claims not already
// prepared on the node. When a driver fails, the drivers that succeeded are
// asked to unprepare again, so nothing stays half prepared.
func (n *Node) prepareClaims(ctx context.Context, spec PodSpec, adm *dracluster.Admission) ([]PreparedClaim, error) {
	if adm == nil {
		return nil, nil
	}
	claims, plugins, err := n.checkClaims(adm)
	if err != nil {
		return nil, fmt.Errorf("%w: pod %s/%s: %w", ErrAdmission, spec.Namespace, spec.Name, err)
	}
	shared := make([]bool, len(claims))
	batches := map[string][]*drapb.Claim{}
	for i := range claims {
		if prev := n.preparedElsewhere(claims[i].UID, nil); prev != nil {
			claims[i].Devices, shared[i] = prev.Devices, true
			continue
		}
		for _, d := range claims[i].Drivers {
			batches[d] = append(batches[d], drapbClaim(claims[i]))
		}
	}
	results := map[string]map[string]*drapb.NodePrepareResourceResponse{}
	for _, d := range slices.Sorted(maps.Keys(batches)) {
		res, err := plugins[d].Prepare(ctx, batches[d])
		if err != nil {
			n.unprepareBatches(context.WithoutCancel(ctx), plugins, batches, slices.Collect(maps.Keys(results)))
			return nil, fmt.Errorf("%w: pod %s/%s: %w", ErrAdmission, spec.Namespace, spec.Name, err)
		}
		results[d] = res
	}
	for i := range claims {
		if shared[i] {
			continue
		}
		for _, d := range claims[i].Drivers {
			for _, dev := range results[d][claims[i].UID].GetDevices() {
				claims[i].Devices = append(claims[i].Devices, PreparedDevice{Driver: d, Pool: dev.GetPoolName(),
					Device: dev.GetDeviceName(), Requests: dev.GetRequestNames(), CDIDeviceIDs: dev.GetCdiDeviceIds()})
			}
		}
	}
	return claims, nil
}

// checkClaims turns the admitted claims into PreparedClaims (devices still
// empty) and finds the plugin of every driver, failing like the kubelet when
// one is not registered.
func (n *Node) checkClaims(adm *dracluster.Admission) ([]PreparedClaim, map[string]*draplugin.Plugin, error) {
	plugins := map[string]*draplugin.Plugin{}
	claims := make([]PreparedClaim, 0, len(adm.Claims))
	for _, cl := range adm.Claims {
		o := cl.Object
		pc := PreparedClaim{PodClaim: cl.PodClaim, Namespace: o.Namespace, Name: o.Name, UID: string(o.UID),
			OwnedByPod: cl.OwnedByPod, Extended: cl.Extended, Drivers: driversOf(o)}
		if stale := n.staleClaim(pc); stale != "" {
			return nil, nil, fmt.Errorf("old ResourceClaim with same name %s and different UID %s still exists", pc.Name, stale)
		}
		for _, d := range pc.Drivers {
			p, err := n.dra.Get(d)
			if err != nil {
				return nil, nil, fmt.Errorf("pod claim %q (ResourceClaim %s/%s): %w", pc.PodClaim, pc.Namespace, pc.Name, err)
			}
			plugins[d] = p
		}
		claims = append(claims, pc)
	}
	return claims, plugins, nil
}

// staleClaim returns the UID of a claim of the same namespace and name but
// another UID that a pod on the node still holds, or "".
func (n *Node) staleClaim(c PreparedClaim) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.pods {
		for _, pc := range p.Claims {
			if pc.Namespace == c.Namespace && pc.Name == c.Name && pc.UID != c.UID {
				return pc.UID
			}
		}
	}
	return ""
}

func (n *Node) unprepareBatches(ctx context.Context, plugins map[string]*draplugin.Plugin, batches map[string][]*drapb.Claim, drivers []string) {
	for _, d := range drivers {
		if err := plugins[d].Unprepare(ctx, batches[d]); err != nil {
			n.log.Error("Unpreparing claims after a failed admission failed", "driver", d, "err", err)
		}
	}
}

// unprepareClaims calls NodeUnprepareResources, per driver, for the claims no
// pod on the node other than except holds. A driver not registered is waited
// for a while: after a restart drivers register again.
func (n *Node) unprepareClaims(ctx context.Context, claims []PreparedClaim, except *PodAllocation) error {
	batches := map[string][]*drapb.Claim{}
	for _, c := range claims {
		if n.preparedElsewhere(c.UID, except) != nil {
			continue
		}
		for _, d := range c.Drivers {
			batches[d] = append(batches[d], drapbClaim(c))
		}
	}
	var errs []error
	for _, d := range slices.Sorted(maps.Keys(batches)) {
		wctx, cancel := context.WithTimeout(ctx, driverWait)
		p, err := n.dra.Wait(wctx, d)
		cancel()
		if err == nil {
			err = p.Unprepare(ctx, batches[d])
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
