package kubeletsim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/devplumb/devplumb/pkg/kubeletsim/dracluster"
	"github.com/devplumb/devplumb/pkg/kubeletsim/draplugin"
)

// driverWait bounds how long unpreparing waits for a driver that is not (yet)
// registered again, e.g. just after a restart.
const driverWait = 30 * time.Second

// registerNodeTimeout bounds registering the Node object at start.
const registerNodeTimeout = 30 * time.Second

// PluginsRegistryDir is where DRA kubelet plugins put their registration
// sockets under a kubelet root.
func PluginsRegistryDir(root string) string { return filepath.Join(root, "plugins_registry") }

// PluginsDir is where DRA kubelet plugins put their DRA sockets under a
// kubelet root (ROOT/plugins/<driver>/dra.sock by convention).
func PluginsDir(root string) string { return filepath.Join(root, "plugins") }

func (n *Node) startDRA(opts *DRAOptions) error {
	if opts == nil {
		return nil
	}
	if opts.Client == nil || opts.NodeName == "" {
		return errors.New("kubeletsim: DRA needs an API client and a node name")
	}
	n.cluster = dracluster.New(opts.Client, opts.NodeName, n.log)
	ctx, cancel := context.WithTimeout(n.ctx, registerNodeTimeout)
	defer cancel()
	if err := n.cluster.RegisterNode(ctx); err != nil {
		return fmt.Errorf("kubeletsim: %w", err)
	}
	// The kubelet wipes its node's slices when it starts (DRAPluginManager in
	// pkg/kubelet/cm/dra/plugin): those of a driver that left while it was
	// down must not draw pods to a node where nothing prepares their claims.
	// A running driver's ResourceSlice controller publishes them again.
	if err := n.cluster.DeleteSlices(ctx, ""); err != nil {
		return fmt.Errorf("kubeletsim: at start: %w", err)
	}
	// The kubelet creates both directories at its start.
	if err := os.MkdirAll(PluginsDir(n.root), 0o750); err != nil {
		return fmt.Errorf("create DRA plugins directory: %w", err)
	}
	m, err := draplugin.Start(PluginsRegistryDir(n.root), n.log)
	if err != nil {
		return err
	}
	n.dra = m
	if delay := cmp.Or(opts.WipeDelay, DefaultWipeDelay); delay > 0 {
		n.watchDrivers(delay)
	}
	return nil
}

// DRADrivers lists the registered DRA drivers (none without DRA).
func (n *Node) DRADrivers() []draplugin.PluginInfo {
	if n.dra == nil {
		return []draplugin.PluginInfo{}
	}
	return n.dra.Drivers()
}

// WaitDRADriver waits until a DRA driver has registered; ctx bounds the wait.
func (n *Node) WaitDRADriver(ctx context.Context, driver string) error {
	if n.dra == nil {
		return fmt.Errorf("%w: this node has no DRA (started without an API server)", ErrInvalidPod)
	}
	_, err := n.dra.Wait(ctx, driver)
	return err
}

func (n *Node) validatePod(spec PodSpec) error {
	if err := validateSpec(spec); err != nil {
		return err
	}
	if len(spec.Claims) == 0 {
		return nil
	}
	if n.cluster == nil {
		return errors.New("pod has resource claims, but this nodesim has no API server to find them in (serve with --kubeconfig and --node-name)")
	}
	if spec.UID != "" {
		return errors.New("a pod with resource claims takes its UID from its Pod object in the API server: give no UID")
	}
	return nil
}

// admitClaims does the control plane's part for a pod with claims, or with
// extended resources a DRA driver serves here (see extendedResources), and
// takes the pod's UID, claims and containers from the Pod object.
func (n *Node) admitClaims(ctx context.Context, spec *PodSpec) (*dracluster.Admission, error) {
	extended, err := n.extendedResources(ctx, *spec)
	if err != nil {
		return nil, fmt.Errorf("%w: pod %s/%s: %w", ErrAdmission, spec.Namespace, spec.Name, err)
	}
	if len(spec.Claims) == 0 && len(extended) == 0 {
		return nil, nil
	}
	if spec.UID != "" {
		return nil, fmt.Errorf("%w: pod %s/%s: its extended resources %v are DRA's here, so it takes its UID from its Pod object "+
			"in the API server: give no UID", ErrInvalidPod, spec.Namespace, spec.Name, extended)
	}
	adm, err := n.cluster.Admit(ctx, n.clusterPod(*spec))
	if err != nil {
		sentinel := ErrAdmission
		if errors.Is(err, dracluster.ErrInvalid) {
			sentinel = ErrInvalidPod
		}
		return nil, fmt.Errorf("%w: pod %s/%s: %w", sentinel, spec.Namespace, spec.Name, err)
	}
	spec.UID = adm.UID
	spec.Claims = nil
	for _, pc := range adm.PodClaims {
		spec.Claims = append(spec.Claims, PodClaim(pc))
	}
	for _, c := range adm.Containers {
		i := slices.IndexFunc(spec.Containers, func(s ContainerSpec) bool { return s.Name == c.Name })
		if i < 0 {
			spec.Containers = append(spec.Containers, ContainerSpec{Name: c.Name, Init: c.Init, Sidecar: c.Sidecar})
			i = len(spec.Containers) - 1
		}
		spec.Containers[i].Claims = c.Claims
	}
	return adm, nil
}

// extendedResources are the resources the pod's containers request that
// the node has no device plugin device of (none allocatable) and a
// DeviceClass serves: the scheduler gives them to the pod through DRA.
func (n *Node) extendedResources(ctx context.Context, spec PodSpec) ([]string, error) {
	if n.cluster == nil {
		return nil, nil
	}
	alloc := n.allocatable()
	var none []string
	for _, c := range spec.Containers {
		for _, r := range c.Requests {
			if alloc[r.Resource] == 0 && !slices.Contains(none, r.Resource) {
				none = append(none, r.Resource)
			}
		}
	}
	if len(none) == 0 {
		return nil, nil
	}
	return n.cluster.ExtendedResources(ctx, none)
}

// allocatable is the node's healthy device plugin devices per resource.
func (n *Node) allocatable() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]int{}
	for res, devs := range n.devices {
		for _, d := range devs {
			if d.Healthy() {
				out[res]++
			}
		}
	}
	return out
}

func (n *Node) clusterPod(spec PodSpec) dracluster.Pod {
	p := dracluster.Pod{Namespace: spec.Namespace, Name: spec.Name, Allocatable: n.allocatable()}
	for _, c := range spec.Claims {
		p.Claims = append(p.Claims, dracluster.PodClaim(c))
	}
	for _, c := range spec.Containers {
		ctr := dracluster.Container{Name: c.Name, Claims: c.Claims, Init: c.Init, Sidecar: c.Sidecar}
		for _, r := range c.Requests {
			if ctr.Requests == nil {
				ctr.Requests = map[string]int64{}
			}
			ctr.Requests[r.Resource] = int64(r.Count)
		}
		p.Containers = append(p.Containers, ctr)
	}
	return p
}

// withoutExtended is the spec without the requests the scheduler gave to
// DRA (the kubelet's device manager leaves the resources
// status.extendedResourceClaimStatus maps to the DRA manager).
func withoutExtended(spec PodSpec, adm *dracluster.Admission) PodSpec {
	if adm == nil || len(adm.Mappings) == 0 {
		return spec
	}
	out := spec
	out.Containers = slices.Clone(spec.Containers)
	for i := range out.Containers {
		c := &out.Containers[i]
		c.Requests = slices.DeleteFunc(slices.Clone(c.Requests), func(r ResourceRequest) bool {
			return slices.ContainsFunc(adm.Mappings, func(m corev1.ContainerExtendedResourceRequest) bool {
				return m.ContainerName == c.Name && m.ResourceName == r.Resource
			})
		})
	}
	return out
}

// noteExtended notes in each container the requests of the
// extended-resource claim mapped to it.
func noteExtended(alloc *PodAllocation, adm *dracluster.Admission) {
	if adm == nil {
		return
	}
	for i := range alloc.Containers {
		c := &alloc.Containers[i]
		for _, m := range adm.Mappings {
			if m.ContainerName == c.Name && !slices.Contains(c.ExtendedRequests, m.RequestName) {
				c.ExtendedRequests = append(c.ExtendedRequests, m.RequestName)
			}
		}
	}
}

func (n *Node) undoClaims(ctx context.Context, spec PodSpec, adm *dracluster.Admission) {
	if adm != nil {
		n.cluster.Undo(ctx, spec.Namespace, spec.Name, adm)
	}
}

// releaseClaims unprepares the pod's claims no other pod holds and releases
// them in the API server.
func (n *Node) releaseClaims(ctx context.Context, pod *PodAllocation) error {
	if len(pod.Claims) == 0 {
		return nil
	}
	if n.cluster == nil {
		return errors.New("the pod has resource claims, but this nodesim has no API server (serve with --kubeconfig and --node-name)")
	}
	if err := n.unprepareClaims(ctx, pod.Claims, pod); err != nil {
		return err
	}
	var refs []dracluster.ClaimRef
	for _, c := range pod.Claims {
		refs = append(refs, dracluster.ClaimRef{Namespace: c.Namespace, Name: c.Name, UID: c.UID, OwnedByPod: c.OwnedByPod})
	}
	return n.cluster.Release(ctx, pod.Namespace, pod.Name, pod.UID, refs)
}

// preparedElsewhere returns the claim as another pod on the node has it
// prepared (the kubelet prepares a shared claim once), or nil.
func (n *Node) preparedElsewhere(uid string, except *PodAllocation) *PreparedClaim {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.pods {
		if p == except {
			continue
		}
		for i := range p.Claims {
			if p.Claims[i].UID == uid {
				c := cloneClaims(p.Claims[i : i+1])[0]
				return &c
			}
		}
	}
	return nil
}

// driversOf lists the drivers of a claim's allocation, sorted.
func driversOf(claim *resourceapi.ResourceClaim) []string {
	var out []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if !slices.Contains(out, r.Driver) {
			out = append(out, r.Driver)
		}
	}
	sort.Strings(out)
	return out
}

func drapbClaim(c PreparedClaim) *drapb.Claim {
	return &drapb.Claim{Namespace: c.Namespace, Uid: c.UID, Name: c.Name}
}
