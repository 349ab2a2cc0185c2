package deviceplugin

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// GetDevicePluginOptions tells the kubelet which optional calls to make.
func (s *Server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return s.options(), nil
}

// ListAndWatch sends the device list now and again after every change.
func (s *Server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		resp := &pluginapi.ListAndWatchResponse{Devices: toAPI(s.Devices())}
		if err := stream.Send(resp); err != nil {
			return fmt.Errorf("ListAndWatch %s: send: %w", s.cfg.ResourceName, err)
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		case <-s.stopped:
			return nil
		}
	}
}

func toAPI(devs []Device) []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(devs))
	for _, d := range devs {
		health := pluginapi.Unhealthy
		if d.Healthy {
			health = pluginapi.Healthy
		}
		ad := &pluginapi.Device{ID: d.ID, Health: health}
		if d.NUMANode >= 0 {
			ad.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMANode)}}}
		}
		out = append(out, ad)
	}
	return out
}

// GetPreferredAllocation answers each container request with Preferred.
func (s *Server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for i, cr := range req.GetContainerRequests() {
		ids, err := Preferred(s.numaOf, cr.GetAvailableDeviceIDs(), cr.GetMustIncludeDeviceIDs(), int(cr.GetAllocationSize()))
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "resource %s: container request %d: %v", s.cfg.ResourceName, i, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (s *Server) numaOf(id string) int {
	if d, ok := s.Lookup(id); ok {
		return d.NUMANode
	}
	return NoNUMA
}

// Allocate checks every requested ID and lets the plugin build each
// container's response.
func (s *Server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for i, cr := range req.GetContainerRequests() {
		ids := cr.GetDevicesIds()
		if err := s.checkIDs(ids, true); err != nil {
			s.observe(EventAllocateFailed)
			return nil, status.Errorf(codes.InvalidArgument, "resource %s: allocate container request %d: %v", s.cfg.ResourceName, i, err)
		}
		cresp, err := s.cfg.Allocate(ctx, ids)
		if err != nil {
			s.observe(EventAllocateFailed)
			return nil, status.Errorf(codes.Internal, "resource %s: allocate %v: %v", s.cfg.ResourceName, ids, err)
		}
		s.observe(EventAllocated)
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

// checkIDs refuses empty requests, duplicates, unknown IDs and, when
// wantHealthy, unhealthy ones.
func (s *Server) checkIDs(ids []string, wantHealthy bool) error {
	if len(ids) == 0 {
		return fmt.Errorf("no device IDs")
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return fmt.Errorf("device ID %q requested twice", id)
		}
		seen[id] = true
		d, ok := s.Lookup(id)
		switch {
		case !ok:
			return fmt.Errorf("unknown device ID %q", id)
		case wantHealthy && !d.Healthy:
			return fmt.Errorf("device %q is unhealthy", id)
		}
	}
	return nil
}

// PreStartContainer runs the plugin's PreStart function, if any.
func (s *Server) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	ids := req.GetDevicesIds()
	if err := s.checkIDs(ids, false); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "resource %s: PreStartContainer: %v", s.cfg.ResourceName, err)
	}
	if s.cfg.PreStart != nil {
		if err := s.cfg.PreStart(ctx, ids); err != nil {
			return nil, status.Errorf(codes.Internal, "resource %s: PreStartContainer %v: %v", s.cfg.ResourceName, ids, err)
		}
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}
