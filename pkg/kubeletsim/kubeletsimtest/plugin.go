// Package kubeletsimtest has a small but real deviceplugin v1beta1 plugin for
// tests that need devices on an emulated node (pkg/kubeletsim, nodesim)
// without real hardware.
package kubeletsimtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Plugin is a small but real v1beta1 device plugin: gRPC server on a unix
// socket in the plugin dir, Register on kubelet.sock, ListAndWatch that
// resends on every health change, and re-registration when kubelet.sock is
// created again (a kubelet restart).
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	t        testing.TB
	dir      string
	resource string
	endpoint string
	// Options is what GetDevicePluginOptions answers; set before Start.
	Options *pluginapi.DevicePluginOptions
	// Preferred, when set, answers GetPreferredAllocation; set before Start.
	Preferred func(available []string, size int) []string
	// AllocateErr, when set, is what Allocate answers.
	AllocateErr error

	mu        sync.Mutex
	devs      []*pluginapi.Device
	changed   chan struct{}
	srv       *grpc.Server
	allocs    [][]string
	prestarts [][]string
	regs      int
	regCh     chan struct{} // one value per successful registration
}

// NewPlugin makes a plugin for resource that will serve dir/endpoint (dir is
// the node's device plugin directory) and advertise devs.
func NewPlugin(t testing.TB, dir, resource, endpoint string, devs ...*pluginapi.Device) *Plugin {
	return &Plugin{t: t, dir: dir, resource: resource, endpoint: endpoint,
		Options: &pluginapi.DevicePluginOptions{}, devs: devs, changed: make(chan struct{}), regCh: make(chan struct{}, 16)}
}

// Dev is a healthy device on the given NUMA nodes.
func Dev(id string, numa ...int64) *pluginapi.Device {
	d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
	if len(numa) > 0 {
		d.Topology = &pluginapi.TopologyInfo{}
		for _, n := range numa {
			d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: n})
		}
	}
	return d
}

// Start serves and registers (failing the test if it cannot); with watch it
// serves and registers again whenever kubelet.sock is created (a kubelet restart).
func (p *Plugin) Start(ctx context.Context, watch bool) {
	p.t.Helper()
	if err := p.serveAndRegister(ctx); err != nil {
		p.t.Fatalf("plugin %s: %v", p.resource, err)
	}
	p.t.Cleanup(p.Stop)
	if watch {
		p.watchKubelet(ctx)
	}
}

func (p *Plugin) serveAndRegister(ctx context.Context) error {
	// Stop the old server first: closing its listener unlinks the socket path.
	p.Stop()
	sock := filepath.Join(p.dir, p.endpoint)
	os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go srv.Serve(lis)
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	return p.Register(ctx, pluginapi.Version, p.resource, p.endpoint)
}

// Register sends one RegisterRequest to the node's kubelet.sock.
func (p *Plugin) Register(ctx context.Context, version, resource, endpoint string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// WaitForReady: kubelet.sock appears at bind(), a moment before listen().
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: version, Endpoint: endpoint, ResourceName: resource}, grpc.WaitForReady(true))
	if err == nil {
		p.mu.Lock()
		p.regs++
		p.mu.Unlock()
		p.regCh <- struct{}{}
	}
	return err
}

// watchKubelet re-serves and re-registers when kubelet.sock is created anew.
func (p *Plugin) watchKubelet(ctx context.Context) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := w.Add(p.dir); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	p.t.Cleanup(func() { w.Close(); <-done })
	go func() {
		defer close(done)
		for ev := range w.Events {
			if filepath.Base(ev.Name) == "kubelet.sock" && ev.Has(fsnotify.Create) {
				if err := p.serveAndRegister(ctx); err != nil && !errors.Is(err, context.Canceled) {
					p.t.Errorf("re-register after kubelet restart: %v", err)
				}
			}
		}
	}()
}

// Stop stops serving; the node sees its ListAndWatch stream break.
func (p *Plugin) Stop() {
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// FailAllocate makes Allocate answer err (nil: succeed again).
func (p *Plugin) FailAllocate(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.AllocateErr = err
}

// SetHealth changes a device's health and streams the new list.
func (p *Plugin) SetHealth(id, health string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.devs {
		if d.ID == id {
			d.Health = health
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// WaitRegistrations waits until the plugin has registered n times in all.
func (p *Plugin) WaitRegistrations(ctx context.Context, n int) error {
	for {
		p.mu.Lock()
		got := p.regs
		p.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("plugin registered %d times, want %d: %w", got, n, ctx.Err())
		case <-p.regCh:
		}
	}
}

// Allocations returns the device IDs of every Allocate container request, in order.
func (p *Plugin) Allocations() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.allocs)
}

// PreStarts returns the device IDs of every PreStartContainer call, in order.
func (p *Plugin) PreStarts() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.prestarts)
}

// GetDevicePluginOptions implements the DevicePlugin service.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.Options, nil
}

// ListAndWatch implements the DevicePlugin service.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		p.mu.Lock()
		resp := &pluginapi.ListAndWatchResponse{}
		for _, d := range p.devs {
			resp.Devices = append(resp.Devices, &pluginapi.Device{ID: d.ID, Health: d.Health, Topology: d.Topology})
		}
		ch := p.changed
		p.mu.Unlock()
		if err := s.Send(resp); err != nil {
			return err
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-ch:
		}
	}
}

// GetPreferredAllocation implements the DevicePlugin service.
func (p *Plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{
			DeviceIDs: p.Preferred(cr.GetAvailableDeviceIDs(), int(cr.GetAllocationSize()))})
	}
	return resp, nil
}

// Allocate implements the DevicePlugin service.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	fail := p.AllocateErr
	p.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		ids := cr.GetDevicesIds()
		p.mu.Lock()
		p.allocs = append(p.allocs, slices.Clone(ids))
		p.mu.Unlock()
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"STUB_DEVICES": strings.Join(ids, ",")},
			Mounts:      []*pluginapi.Mount{{ContainerPath: "/dev/stub", HostPath: "/tmp/stub", ReadOnly: true}},
			Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/vfio/1", HostPath: "/dev/vfio/1", Permissions: "rw"}},
			Annotations: map[string]string{"stub/ids": strings.Join(ids, ",")},
			CdiDevices:  []*pluginapi.CDIDevice{{Name: "example.com/stub=" + ids[0]}},
		})
	}
	return resp, nil
}

// PreStartContainer implements the DevicePlugin service.
func (p *Plugin) PreStartContainer(_ context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prestarts = append(p.prestarts, slices.Clone(req.GetDevicesIds()))
	return &pluginapi.PreStartContainerResponse{}, nil
}
