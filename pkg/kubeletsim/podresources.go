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

func podResources(p *PodAllocation) *v1.PodResources {
	pr := &v1.PodResources{Namespace: p.Namespace, Name: p.Name}
	for _, c := range p.Containers {
		cr := &v1.ContainerResources{Name: c.Name}
		for _, r := range c.Resources {
			cr.Devices = append(cr.Devices, byNUMA(r)...)
		}
		cr.DynamicResources = dynamicResources(p, c)
		pr.Containers = append(pr.Containers, cr)
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

// dynamicResources reports the claims a container references, as the
// kubelet's GetDynamicResources does (pkg/kubelet/cm, GetContainerClaimInfos):
// pod claims in pod order, each once per reference in the container's
// resources.claims; a claim no container references is reported for none.
// Each device is one ClaimResource with the CDI devices of the driver's
// NodePrepareResources answer.
func dynamicResources(p *PodAllocation, c ContainerAllocation) []*v1.DynamicResource {
	var out []*v1.DynamicResource
	for _, pc := range p.Claims {
		for _, ref := range c.Claims {
			if ref != pc.PodClaim {
				continue
			}
			dr := &v1.DynamicResource{ClaimName: pc.Name, ClaimNamespace: pc.Namespace}
			for _, d := range pc.Devices {
				res := &v1.ClaimResource{DriverName: d.Driver, PoolName: d.Pool, DeviceName: d.Device}
				for _, id := range d.CDIDeviceIDs {
					res.CdiDevices = append(res.CdiDevices, &v1.CDIDevice{Name: id})
				}
				dr.ClaimResources = append(dr.ClaimResources, res)
			}
			out = append(out, dr)
		}
	}
	return out
}
