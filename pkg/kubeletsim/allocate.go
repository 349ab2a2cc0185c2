package kubeletsim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

var (
	// ErrPodNotFound: DelPod of a pod the node does not have.
	ErrPodNotFound = errors.New("pod not found")
	// ErrPodExists: AddPod of a namespace/name the node already has.
	ErrPodExists = errors.New("pod already exists")
	// ErrInvalidPod: the PodSpec is malformed.
	ErrInvalidPod = errors.New("invalid pod")
	// ErrAdmission: the node could not give the pod its devices (none free,
	// plugin not registered, a plugin call failed), as a kubelet fails admission.
	ErrAdmission = errors.New("pod admission failed")
)

// rpcTimeout bounds each call to a plugin during admission; PreStartContainer
// gets the kubelet's 30 s.
const (
	rpcTimeout      = 30 * time.Second
	preStartTimeout = pluginapi.KubeletPreStartContainerRPCTimeoutInSecs * time.Second
)

// AddPod admits a pod the way the kubelet's device manager does: for each
// container and resource, pick healthy free devices (GetPreferredAllocation
// when the plugin offers it), call Allocate, then PreStartContainer when the
// plugin requires it. A pod with claims is first made ready in the API server
// (see DRAOptions) and its claims are prepared by their DRA drivers after the
// devices are allocated. Nothing is recorded unless every step succeeds, and
// what a failed admission did in the API server and with DRA drivers is
// undone; the checkpoint is written before AddPod returns.
func (n *Node) AddPod(ctx context.Context, spec PodSpec) (*PodAllocation, error) {
	if err := n.validatePod(spec); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPod, err)
	}
	n.allocMu.Lock()
	defer n.allocMu.Unlock()
	if n.findPod(spec.Namespace, spec.Name) >= 0 {
		return nil, fmt.Errorf("pod %s/%s: %w", spec.Namespace, spec.Name, ErrPodExists)
	}
	adm, err := n.admitClaims(ctx, &spec)
	if err != nil {
		return nil, err
	}
	if spec.UID == "" {
		spec.UID = newUID()
	}
	alloc, err := n.admitDevices(ctx, withoutExtended(spec, adm))
	if err == nil {
		noteExtended(alloc, adm)
		alloc.Claims, err = n.prepareClaims(ctx, spec, adm)
	}
	if err == nil {
		if err = n.record(alloc); err != nil {
			n.unprepareClaims(context.WithoutCancel(ctx), alloc.Claims, nil)
		}
	}
	if err != nil {
		n.undoClaims(ctx, spec, adm)
		return nil, err
	}
	n.log.Info("Admitted pod with devices", "pod", spec.Namespace+"/"+spec.Name, "uid", spec.UID,
		"devices", summary(alloc), "claims", len(alloc.Claims))
	out := alloc.clone()
	return &out, nil
}

// admitDevices allocates the pod's device plugin resources.
func (n *Node) admitDevices(ctx context.Context, spec PodSpec) (*PodAllocation, error) {
	alloc := &PodAllocation{Namespace: spec.Namespace, Name: spec.Name, UID: spec.UID}
	taken := n.inUse()
	var prestart []func() error
	for _, c := range spec.Containers {
		if c.Init && !c.Sidecar && len(c.Requests) > 0 {
			// The device manager lets the containers reuse an init container's
			// devices; nodesim does not model that.
			return nil, fmt.Errorf("%w: pod %s/%s init container %s: nodesim gives init containers no device plugin devices "+
				"(only sidecars, and DRA's extended resources)", ErrInvalidPod, spec.Namespace, spec.Name, c.Name)
		}
		ca := ContainerAllocation{Name: c.Name, Claims: slices.Clone(c.Claims), Init: c.Init, Sidecar: c.Sidecar}
		for _, r := range c.Requests {
			ra, ep, err := n.allocate(ctx, r, taken)
			if err != nil {
				return nil, fmt.Errorf("%w: pod %s/%s container %s: %w", ErrAdmission, spec.Namespace, spec.Name, c.Name, err)
			}
			for _, id := range ra.DeviceIDs {
				taken[r.Resource+"\x00"+id] = true
			}
			ca.Resources = append(ca.Resources, ra)
			if ep.opts.GetPreStartRequired() {
				prestart = append(prestart, n.preStart(ctx, ep, c.Name, ra.DeviceIDs))
			}
		}
		alloc.Containers = append(alloc.Containers, ca)
	}
	// Containers start after admission; PreStartContainer comes then.
	for _, f := range prestart {
		if err := f(); err != nil {
			return nil, fmt.Errorf("%w: pod %s/%s: %w", ErrAdmission, spec.Namespace, spec.Name, err)
		}
	}
	return alloc, nil
}

// allocate picks and allocates the devices of one request of one container.
func (n *Node) allocate(ctx context.Context, r ResourceRequest, taken map[string]bool) (ResourceAllocation, *endpoint, error) {
	ep, free, numa, err := n.candidates(r.Resource, taken)
	if err != nil {
		return ResourceAllocation{}, nil, err
	}
	if len(free) < r.Count {
		return ResourceAllocation{}, nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d",
			r.Resource, r.Count, len(free))
	}
	ids := free[:r.Count]
	if ep.opts.GetGetPreferredAllocationAvailable() {
		if ids, err = n.preferred(ctx, ep, free, r.Count); err != nil {
			return ResourceAllocation{}, nil, err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := ep.client.Allocate(cctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return ResourceAllocation{}, nil, fmt.Errorf("device plugin %s Allocate(%v): %w", r.Resource, ids, err)
	}
	if len(resp.GetContainerResponses()) != 1 {
		return ResourceAllocation{}, nil, fmt.Errorf("device plugin %s Allocate(%v) answered %d container responses for 1 request",
			r.Resource, ids, len(resp.GetContainerResponses()))
	}
	ra := ResourceAllocation{Resource: r.Resource, DeviceIDs: slices.Clone(ids),
		NUMANodes: map[string][]int64{}, Response: resp.GetContainerResponses()[0]}
	for _, id := range ids {
		if len(numa[id]) > 0 {
			ra.NUMANodes[id] = numa[id]
		}
	}
	return ra, ep, nil
}

// candidates returns the plugin and its healthy devices not taken, in the
// plugin's order, with their NUMA nodes.
func (n *Node) candidates(res string, taken map[string]bool) (*endpoint, []string, map[string][]int64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep := n.endpoints[res]
	if ep == nil {
		return nil, nil, nil, fmt.Errorf("cannot allocate unregistered device %s", res)
	}
	var free []string
	numa := map[string][]int64{}
	for _, d := range n.devices[res] {
		if d.Healthy() && !taken[res+"\x00"+d.ID] {
			free = append(free, d.ID)
			numa[d.ID] = slices.Clone(d.NUMANodes)
		}
	}
	return ep, free, numa, nil
}

// preferred asks the plugin which of the free devices it prefers and keeps
// only valid answers, filling up from the free list like the kubelet.
func (n *Node) preferred(ctx context.Context, ep *endpoint, free []string, count int) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := ep.client.GetPreferredAllocation(cctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: free, AllocationSize: int32(count)}}})
	if err != nil {
		return nil, fmt.Errorf("device plugin %s GetPreferredAllocation: %w", ep.resource, err)
	}
	var ids []string
	for _, cr := range resp.GetContainerResponses() {
		for _, id := range cr.GetDeviceIDs() {
			if len(ids) < count && slices.Contains(free, id) && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	for _, id := range free {
		if len(ids) < count && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (n *Node) preStart(ctx context.Context, ep *endpoint, container string, ids []string) func() error {
	return func() error {
		cctx, cancel := context.WithTimeout(ctx, preStartTimeout)
		defer cancel()
		if _, err := ep.client.PreStartContainer(cctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids}); err != nil {
			return fmt.Errorf("container %s: device plugin %s PreStartContainer(%v): %w", container, ep.resource, ids, err)
		}
		return nil
	}
}

// DelPod is DelPodContext without a deadline.
func (n *Node) DelPod(namespace, name string) error {
	return n.DelPodContext(context.Background(), namespace, name)
}

// DelPodContext frees a pod's devices and writes the checkpoint. A pod with
// claims has them unprepared by their drivers (unless another pod on the node
// still uses them) and released in the API server first; when that fails the
// pod stays, as the kubelet keeps a pod whose resources it cannot unprepare,
// and DelPodContext can be called again.
func (n *Node) DelPodContext(ctx context.Context, namespace, name string) error {
	n.allocMu.Lock()
	defer n.allocMu.Unlock()
	n.mu.Lock()
	i := n.findPodLocked(namespace, name)
	if i < 0 {
		n.mu.Unlock()
		return fmt.Errorf("pod %s/%s: %w", namespace, name, ErrPodNotFound)
	}
	pod := n.pods[i]
	n.mu.Unlock()
	if err := n.releaseClaims(ctx, pod); err != nil {
		return fmt.Errorf("pod %s/%s kept, run pod del again: %w", namespace, name, err)
	}
	n.mu.Lock()
	n.pods = slices.Delete(slices.Clone(n.pods), i, i+1)
	err := n.saveCheckpointLocked()
	if err != nil {
		n.pods = slices.Insert(n.pods, i, pod) // keep memory and disk in agreement
	} else {
		n.notifyLocked()
	}
	n.mu.Unlock()
	if err != nil {
		return err
	}
	n.log.Info("Removed pod, devices freed", "pod", namespace+"/"+name, "devices", summary(pod), "claims", len(pod.Claims))
	return nil
}

// Pods returns the admitted pods in the order they were added.
func (n *Node) Pods() []PodAllocation {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]PodAllocation, 0, len(n.pods))
	for _, p := range n.pods {
		out = append(out, p.clone())
	}
	return out
}

func (n *Node) record(alloc *PodAllocation) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pods = append(n.pods, alloc)
	if err := n.saveCheckpointLocked(); err != nil {
		n.pods = n.pods[:len(n.pods)-1]
		return err
	}
	n.notifyLocked()
	return nil
}

// inUse is the set of resource+"\x00"+deviceID already assigned.
func (n *Node) inUse() map[string]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	used := map[string]bool{}
	for _, p := range n.pods {
		for _, c := range p.Containers {
			for _, r := range c.Resources {
				for _, id := range r.DeviceIDs {
					used[r.Resource+"\x00"+id] = true
				}
			}
		}
	}
	return used
}

func (n *Node) findPod(namespace, name string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.findPodLocked(namespace, name)
}

func (n *Node) findPodLocked(namespace, name string) int {
	return slices.IndexFunc(n.pods, func(p *PodAllocation) bool {
		return p.Namespace == namespace && p.Name == name
	})
}

func summary(p *PodAllocation) map[string][]string {
	out := map[string][]string{}
	for _, c := range p.Containers {
		for _, r := range c.Resources {
			out[c.Name+":"+r.Resource] = r.DeviceIDs
		}
	}
	return out
}

// newUID makes a random RFC 4122 version 4 UUID, like a pod UID.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
