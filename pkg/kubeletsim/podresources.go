package kubeletsim

import (
	"slices"
	"sort"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// The Node is the podresourcesserver.Source of its PodResources server.

// ListPods answers List: every admitted pod, in the order added.
func (n *Node) ListPods() []*v1.PodResources {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*v1.PodResources, 0, len(n.pods))
	for _, p := range n.pods {
		out = append(out, podResources(p))
	}
	return out
}

// GetPod answers Get.
func (n *Node) GetPod(namespace, name string) (*v1.PodResources, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := n.findPodLocked(namespace, name)
	if i < 0 {
		return nil, false
	}
	return podResources(n.pods[i]), true
}

// Allocatable answers GetAllocatableResources: one entry per healthy device,
// with its NUMA nodes, as the kubelet reports allocatable devices.
func (n *Node) Allocatable() *v1.AllocatableResourcesResponse {
	n.mu.Lock()
	defer n.mu.Unlock()
	resp := &v1.AllocatableResourcesResponse{}
	names := make([]string, 0, len(n.devices))
	for res := range n.devices {
		names = append(names, res)
	}
	sort.Strings(names)
	for _, res := range names {
		for _, d := range n.devices[res] {
			if d.Healthy() {
				resp.Devices = append(resp.Devices, &v1.ContainerDevices{
					ResourceName: res, DeviceIds: []string{d.ID}, Topology: topology(d.NUMANodes)})
			}
		}
	}
	return resp
}

// podResources is the kubelet's answer for a pod: its sidecar init
// containers, then its containers (other init containers have ended).
func podResources(p *PodAllocation) *v1.PodResources {
	pr := &v1.PodResources{Namespace: p.Namespace, Name: p.Name}
	for _, sidecars := range []bool{true, false} {
		for _, c := range p.Containers {
			if c.Init != sidecars || (c.Init && !c.Sidecar) {
				continue
			}
			cr := &v1.ContainerResources{Name: c.Name}
			for _, r := range c.Resources {
				cr.Devices = append(cr.Devices, byNUMA(r)...)
			}
			cr.DynamicResources = dynamicResources(p, c)
			pr.Containers = append(pr.Containers, cr)
		}
	}
	return pr
}

// byNUMA groups a container's devices of one resource per NUMA node like the
// kubelet (devices without topology in one group without topology); groups
// come in the order their first device was allocated.
func byNUMA(r ResourceAllocation) []*v1.ContainerDevices {
	const none = int64(-1)
	var order []int64
	groups := map[int64][]string{}
	add := func(node int64, id string) {
		if _, ok := groups[node]; !ok {
			order = append(order, node)
		}
		groups[node] = append(groups[node], id)
	}
	for _, id := range r.DeviceIDs {
		nodes := r.NUMANodes[id]
		if len(nodes) == 0 {
			add(none, id)
		}
		for _, node := range nodes {
			add(node, id)
		}
	}
	out := make([]*v1.ContainerDevices, 0, len(order))
	for _, node := range order {
		cd := &v1.ContainerDevices{ResourceName: r.Resource, DeviceIds: slices.Clone(groups[node])}
		if node != none {
			cd.Topology = topology([]int64{node})
		}
		out = append(out, cd)
	}
	return out
}

func topology(nodes []int64) *v1.TopologyInfo {
	if len(nodes) == 0 {
		return nil
	}
	t := &v1.TopologyInfo{}
	for _, id := range nodes {
		t.Nodes = append(t.Nodes, &v1.NUMANode{ID: id})
	}
	return t
}

// dynamicResources reports the claims a container uses, as the kubelet's
// GetDynamicResources does (pkg/kubelet/cm, GetContainerClaimInfos): the pod
// claims it references (whole, whichever of their requests it names), in
// pod order, then the claim the scheduler made for the pod's extended
// resources if status.extendedResourceClaimStatus maps any to it; a claim no
// container uses is reported for none. Each device is one ClaimResource
// with the CDI devices the driver's NodePrepareResources answered, listed
// as the kubelet lists them (see claimResources).
func dynamicResources(p *PodAllocation, c ContainerAllocation) []*v1.DynamicResource {
	var out []*v1.DynamicResource
	for _, pc := range p.Claims {
		uses := pc.Extended && len(c.ExtendedRequests) > 0
		if !pc.Extended {
			uses = slices.ContainsFunc(c.Claims, func(ref string) bool { return claimName(ref) == pc.PodClaim })
		}
		if uses {
			out = append(out, &v1.DynamicResource{ClaimName: pc.Name, ClaimNamespace: pc.Namespace, ClaimResources: claimResources(pc)})
		}
	}
	return out
}

// claimResources are a claim's devices as kubelets 1.34 through 1.37 report
// them: the CDI devices of one driver's devices gathered in one list, each
// device reported with the list so far (the second device of a driver gets
// the first's CDI devices, then its own). Drivers come in name order (the
// kubelet's is a map's).
func claimResources(pc PreparedClaim) []*v1.ClaimResource {
	var out []*v1.ClaimResource
	gathered := map[string][]*v1.CDIDevice{}
	for _, d := range pc.Devices {
		for _, id := range d.CDIDeviceIDs {
			gathered[d.Driver] = append(gathered[d.Driver], &v1.CDIDevice{Name: id})
		}
		out = append(out, &v1.ClaimResource{DriverName: d.Driver, PoolName: d.Pool, DeviceName: d.Device,
			CdiDevices: slices.Clone(gathered[d.Driver])})
	}
	return out
}
