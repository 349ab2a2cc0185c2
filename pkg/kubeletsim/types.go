package kubeletsim

import (
	"encoding/json"
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// PodSpec is the part of a pod the device manager looks at.
type PodSpec struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is generated when empty.
	UID        string          `json:"uid,omitempty"`
	Containers []ContainerSpec `json:"containers"`
	// Claims are the pod's spec.resourceClaims. A pod with claims needs a
	// node started with DRA options (an API server); its UID is then the Pod
	// object's.
	Claims []PodClaim `json:"claims,omitempty"`
}

// ContainerSpec is one container's extended resource requests (limits == requests).
type ContainerSpec struct {
	Name     string            `json:"name"`
	Requests []ResourceRequest `json:"requests,omitempty"`
	// Claims are the pod claims the container references (resources.claims):
	// "PODCLAIM", or "PODCLAIM/REQUEST" for one request of it. PodResources
	// reports a claim (all its devices) only for the containers that
	// reference it.
	Claims []string `json:"claims,omitempty"`
	// Init: an init container; Sidecar: one that keeps running
	// (restartPolicy Always). PodResources reports sidecars, before the
	// containers, and no other init container.
	Init    bool `json:"init,omitempty"`
	Sidecar bool `json:"sidecar,omitempty"`
}

// ResourceRequest asks for Count devices of Resource.
type ResourceRequest struct {
	Resource string `json:"resource"`
	Count    int    `json:"count"`
}

// PodAllocation is what the node assigned to a pod.
type PodAllocation struct {
	Namespace  string                `json:"namespace"`
	Name       string                `json:"name"`
	UID        string                `json:"uid"`
	Containers []ContainerAllocation `json:"containers"`
	// Claims are the pod's prepared ResourceClaims, in pod spec order.
	Claims []PreparedClaim `json:"claims,omitempty"`
}

// ContainerAllocation is one container's devices, per resource.
type ContainerAllocation struct {
	Name      string               `json:"name"`
	Resources []ResourceAllocation `json:"resources"`
	// Claims are the pod claims the container references.
	Claims []string `json:"claims,omitempty"`
	// ExtendedRequests are the requests of the pod's extended-resource claim
	// (made by the scheduler for its extended resources that DRA serves)
	// mapped to this container: the kubelet reports that claim for it.
	ExtendedRequests []string `json:"extendedRequests,omitempty"`
	Init             bool     `json:"init,omitempty"`
	Sidecar          bool     `json:"sidecar,omitempty"`
}

// ResourceAllocation is the devices of one resource given to one container and
// the plugin's answer to the Allocate call for them. In JSON the response is
// the protobuf JSON form of ContainerAllocateResponse (envs, mounts, devices,
// annotations, cdiDevices).
type ResourceAllocation struct {
	Resource  string   `json:"resource"`
	DeviceIDs []string `json:"deviceIDs"`
	// NUMANodes per device ID, as the plugin advertised at allocation time.
	NUMANodes map[string][]int64                   `json:"numaNodes,omitempty"`
	Response  *pluginapi.ContainerAllocateResponse `json:"-"`
}

type resourceAllocationJSON struct {
	Resource  string             `json:"resource"`
	DeviceIDs []string           `json:"deviceIDs"`
	NUMANodes map[string][]int64 `json:"numaNodes,omitempty"`
	Response  json.RawMessage    `json:"allocateResponse"`
}

// MarshalJSON writes the response with protojson, so every field the plugin
// set is shown under its API name.
func (r ResourceAllocation) MarshalJSON() ([]byte, error) {
	resp := r.Response
	if resp == nil {
		resp = &pluginapi.ContainerAllocateResponse{}
	}
	raw, err := protojson.MarshalOptions{}.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("encode AllocateResponse of %s: %w", r.Resource, err)
	}
	return json.Marshal(resourceAllocationJSON{r.Resource, r.DeviceIDs, r.NUMANodes, raw})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (r *ResourceAllocation) UnmarshalJSON(data []byte) error {
	var j resourceAllocationJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	resp := &pluginapi.ContainerAllocateResponse{}
	if len(j.Response) > 0 && string(j.Response) != "null" {
		if err := protojson.Unmarshal(j.Response, resp); err != nil {
			return fmt.Errorf("decode AllocateResponse of %s: %w", j.Resource, err)
		}
	}
	*r = ResourceAllocation{Resource: j.Resource, DeviceIDs: j.DeviceIDs, NUMANodes: j.NUMANodes, Response: resp}
	return nil
}

// Devices returns the IDs of res given to the container, in allocation order.
func (c ContainerAllocation) Devices(res string) []string {
	for _, r := range c.Resources {
		if r.Resource == res {
			return r.DeviceIDs
		}
	}
	return nil
}

// Devices returns the IDs of res given to the pod, containers in order.
func (p PodAllocation) Devices(res string) []string {
	var ids []string
	for _, c := range p.Containers {
		ids = append(ids, c.Devices(res)...)
	}
	return ids
}

func (p *PodAllocation) clone() PodAllocation {
	out := *p
	out.Claims = cloneClaims(p.Claims)
	out.Containers = make([]ContainerAllocation, len(p.Containers))
	for i, c := range p.Containers {
		out.Containers[i] = ContainerAllocation{Name: c.Name, Resources: make([]ResourceAllocation, len(c.Resources)),
			Claims: slices.Clone(c.Claims), ExtendedRequests: slices.Clone(c.ExtendedRequests), Init: c.Init, Sidecar: c.Sidecar}
		for j, r := range c.Resources {
			cr := r
			cr.DeviceIDs = slices.Clone(r.DeviceIDs)
			cr.NUMANodes = make(map[string][]int64, len(r.NUMANodes))
			for id, nn := range r.NUMANodes {
				cr.NUMANodes[id] = slices.Clone(nn)
			}
			if r.Response != nil {
				cr.Response = proto.Clone(r.Response).(*pluginapi.ContainerAllocateResponse)
			}
			out.Containers[i].Resources[j] = cr
		}
	}
	return out
}
