package deviceplugin

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func newTestServer(t *testing.T, dir string) *Server {
	t.Helper()
	s, err := New(Config{
		ResourceName: "example.com/netdev",
		PluginDir:    dir,
		Allocate: func(_ context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
			return &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"IDS": strings.Join(ids, ",")}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Update([]Device{{ID: "a", Healthy: true, NUMANode: 0}, {ID: "b", Healthy: false, NUMANode: 1}})
	return s
}

func TestNewRejectsBadConfig(t *testing.T) {
	alloc := func(context.Context, []string) (*pluginapi.ContainerAllocateResponse, error) { return nil, nil }
	for _, c := range []Config{
		{ResourceName: "noslash", Allocate: alloc},
		{ResourceName: "a/b/c", Allocate: alloc},
		{ResourceName: "kubernetes.io/gpu", Allocate: alloc}, // the kubelet would refuse these
		{ResourceName: "example.com/bad name", Allocate: alloc},
		{ResourceName: "a/b"},
		{ResourceName: "a/b", Allocate: alloc, Endpoint: "../x.sock"},
		{ResourceName: "a/b", Allocate: alloc, Endpoint: "kubelet.sock"},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted a bad config", c)
		}
	}
}

func TestRegisterServeAndStop(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	// A stale socket from an earlier run must not stop the plugin.
	if err := os.WriteFile(dir+"/example_com_netdev.sock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, dir)
	stop := runServer(t, s)
	r := k.waitRegistration(t)
	if r.Version != pluginapi.Version || r.ResourceName != "example.com/netdev" || r.Endpoint != "example_com_netdev.sock" {
		t.Fatalf("registration %+v", r)
	}
	if !r.Options.GetGetPreferredAllocationAvailable() || r.Options.GetPreStartRequired() {
		t.Fatalf("options %+v", r.Options)
	}
	c := dialPlugin(t, dir, r.Endpoint)
	stream, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Devices) != 2 || first.Devices[0].Health != pluginapi.Healthy || first.Devices[1].Health != pluginapi.Unhealthy ||
		first.Devices[1].Topology.Nodes[0].ID != 1 {
		t.Fatalf("first list %v", first.Devices)
	}
	s.Update([]Device{{ID: "a", Healthy: false, NUMANode: 0}})
	second, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Devices) != 1 || second.Devices[0].Health != pluginapi.Unhealthy {
		t.Fatalf("second list %v", second.Devices)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after stop: %v", err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("stream still open after stop")
	}
}

func TestReRegisterAfterKubeletRestart(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	s := newTestServer(t, dir)
	runServer(t, s)
	k.waitRegistration(t)
	k.stop()
	// The restarted kubelet removes the plugin socket and creates kubelet.sock.
	k2 := startFakeKubelet(t, dir)
	r := k2.waitRegistration(t)
	c := dialPlugin(t, dir, r.Endpoint)
	if _, err := c.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{}); err != nil {
		t.Fatalf("plugin not serving after kubelet restart: %v", err)
	}
	// Removing the plugin socket alone also leads to a new registration.
	// Events are handled in order, so when it arrives the kubelet.sock
	// creation was handled too and must not have registered a second time.
	if err := os.Remove(s.SocketPath()); err != nil {
		t.Fatal(err)
	}
	k2.waitRegistration(t)
	if n := len(k2.regs); n != 0 {
		t.Fatalf("%d duplicate registrations with one kubelet.sock", n)
	}
	if _, err := c.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("plugin not serving after its socket was removed: %v", err)
	}
}

func TestRegisterWhenKubeletAppearsLater(t *testing.T) {
	dir := t.TempDir()
	s := newTestServer(t, dir)
	runServer(t, s)
	// Without removing the plugin socket: kubelet.sock creation alone must
	// lead to registration.
	k := startFake(t, dir, false)
	k.waitRegistration(t)
}

func TestAllocateChecksIDs(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	s := newTestServer(t, dir)
	runServer(t, s)
	c := dialPlugin(t, dir, k.waitRegistration(t).Endpoint)
	ctx := context.Background()
	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"a"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContainerResponses[0].Envs["IDS"] != "a" {
		t.Fatalf("response %v", resp)
	}
	for id, want := range map[string]string{"zz": "unknown device ID \"zz\"", "b": "device \"b\" is unhealthy"} {
		_, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"a", id}}}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("Allocate a,%s: got %v, want InvalidArgument %q", id, err, want)
		}
	}
	if _, err := c.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
}

func TestPreStartOption(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	called := make(chan []string, 1)
	s, err := New(Config{
		ResourceName: "example.com/netdev",
		PluginDir:    dir,
		Allocate: func(context.Context, []string) (*pluginapi.ContainerAllocateResponse, error) {
			return &pluginapi.ContainerAllocateResponse{}, nil
		},
		PreStart: func(_ context.Context, ids []string) error { called <- ids; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Update([]Device{{ID: "a", Healthy: true, NUMANode: NoNUMA}})
	runServer(t, s)
	r := k.waitRegistration(t)
	if !r.Options.GetPreStartRequired() {
		t.Fatal("PreStartRequired not registered")
	}
	c := dialPlugin(t, dir, r.Endpoint)
	if _, err := c.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if ids := <-called; len(ids) != 1 || ids[0] != "a" {
		t.Fatalf("PreStart got %v", ids)
	}
	if _, err := c.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"nope"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("PreStart of unknown device: %v", err)
	}
	resp, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := resp.Recv()
	if err != nil || list.Devices[0].Topology != nil {
		t.Fatalf("device without NUMA: %v %v", list, err)
	}
}

// A device's Detail is the plugin's own description, kept in the one device map:
// Lookup returns the latest, and a change of it alone sends the kubelet nothing
// (a detail that holds slices is never compared).
func TestDetailIsKeptNotSent(t *testing.T) {
	s := newTestServer(t, t.TempDir())
	s.mu.Lock()
	before := s.changed
	s.mu.Unlock()
	s.Update([]Device{{ID: "a", Healthy: true, NUMANode: 0, Detail: []string{"/dev/vfio/1"}},
		{ID: "b", Healthy: false, NUMANode: 1, Detail: []string{"/dev/vfio/2"}}})
	select {
	case <-before:
		t.Error("a change of details alone was sent to the kubelet")
	default:
	}
	if d, ok := s.Lookup("a"); !ok || d.Detail.([]string)[0] != "/dev/vfio/1" {
		t.Errorf("Lookup(a) = %+v, %v: want the new detail", d, ok)
	}
	s.Update([]Device{{ID: "a", Healthy: false, NUMANode: 0, Detail: []string{"/dev/vfio/1"}}})
	select {
	case <-before:
	default:
		t.Error("a health change was not sent")
	}
}
