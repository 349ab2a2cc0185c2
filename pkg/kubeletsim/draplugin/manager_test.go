package draplugin

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// regServer is a plugin's side of the registration API, as kubeletplugin
// serves it: GetInfo answers info, NotifyRegistrationStatus is passed on.
type regServer struct {
	registerapi.UnimplementedRegistrationServer
	info   *registerapi.PluginInfo
	status chan *registerapi.RegistrationStatus
}

func (s *regServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return s.info, nil
}

func (s *regServer) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.status <- st
	return &registerapi.RegistrationStatusResponse{}, nil
}

// draServer answers NodePrepareResources with one device per claim, named
// after the claim, or what answer says for a claim name.
type draServer struct {
	drapbv1.UnimplementedDRAPluginServer
	answer map[string]*drapbv1.NodePrepareResourceResponse
}

func (s *draServer) NodePrepareResources(_ context.Context, req *drapbv1.NodePrepareResourcesRequest) (*drapbv1.NodePrepareResourcesResponse, error) {
	out := &drapbv1.NodePrepareResourcesResponse{Claims: map[string]*drapbv1.NodePrepareResourceResponse{}}
	for _, c := range req.GetClaims() {
		if a, ok := s.answer[c.GetName()]; ok {
			if a != nil {
				out.Claims[c.GetUid()] = a
			}
			continue
		}
		out.Claims[c.GetUid()] = &drapbv1.NodePrepareResourceResponse{Devices: []*drapbv1.Device{{
			PoolName: "pool", DeviceName: c.GetName(), CdiDeviceIds: []string{"vendor.com/net=" + c.GetName()}}}}
	}
	return out, nil
}

func (s *draServer) NodeUnprepareResources(_ context.Context, req *drapbv1.NodeUnprepareResourcesRequest) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	out := &drapbv1.NodeUnprepareResourcesResponse{Claims: map[string]*drapbv1.NodeUnprepareResourceResponse{}}
	for _, c := range req.GetClaims() {
		out.Claims[c.GetUid()] = &drapbv1.NodeUnprepareResourceResponse{}
	}
	return out, nil
}

func serve(t *testing.T, path string, register func(*grpc.Server)) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
}

// plugin starts a plugin named driver in dir: its DRA endpoint (v1, v1beta1
// or both as services says) and then its registration socket.
func plugin(t *testing.T, dir, driver, typ string, services []string, dra *draServer) *regServer {
	t.Helper()
	endpoint := filepath.Join(dir, driver+".sock")
	serve(t, endpoint, func(s *grpc.Server) {
		drapbv1.RegisterDRAPluginServer(s, dra)
		drapbv1beta1.RegisterDRAPluginServer(s, drapbv1beta1.V1ServerWrapper{DRAPluginServer: dra})
	})
	reg := &regServer{info: &registerapi.PluginInfo{Type: typ, Name: driver, Endpoint: endpoint, SupportedVersions: services},
		status: make(chan *registerapi.RegistrationStatus, 1)}
	serve(t, filepath.Join(dir, "reg", driver+"-reg.sock"), func(s *grpc.Server) { registerapi.RegisterRegistrationServer(s, reg) })
	return reg
}

func start(t *testing.T) (string, *Manager) {
	t.Helper()
	dir, err := os.MkdirTemp("", "drap")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m, err := Start(filepath.Join(dir, "reg"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return dir, m
}

func status(t *testing.T, r *regServer) *registerapi.RegistrationStatus {
	t.Helper()
	select {
	case st := <-r.status:
		return st
	case <-t.Context().Done():
		t.Fatal("no registration status")
		return nil
	}
}

func TestRegisterPrepareUnprepare(t *testing.T) {
	dir, m := start(t)
	dra := &draServer{answer: map[string]*drapbv1.NodePrepareResourceResponse{
		"broken": {Error: "no such VF"}, "skipped": nil}}
	reg := plugin(t, dir, "net.example.com", registerapi.DRAPlugin,
		[]string{"v2.DRAPlugin", drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService}, dra)
	if st := status(t, reg); !st.PluginRegistered || st.Error != "" {
		t.Fatalf("status %+v, want registered", st)
	}
	p, err := m.Wait(t.Context(), "net.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if p.Service != drapbv1.DRAPluginService {
		t.Errorf("chose %s, want the first the kubelet speaks, %s", p.Service, drapbv1.DRAPluginService)
	}
	res, err := p.Prepare(t.Context(), []*drapbv1.Claim{{Namespace: "ns", Name: "c1", Uid: "u1"}})
	if err != nil || res["u1"].GetDevices()[0].GetCdiDeviceIds()[0] != "vendor.com/net=c1" {
		t.Fatalf("Prepare = %v, %v", res, err)
	}
	for name, want := range map[string]string{
		"broken":  "NodePrepareResources failed for ResourceClaim broken: no such VF",
		"skipped": "NodePrepareResources skipped 1 ResourceClaims",
	} {
		if _, err := p.Prepare(t.Context(), []*drapbv1.Claim{{Namespace: "ns", Name: name, Uid: "u-" + name}}); err == nil ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("Prepare(%s) = %v, want %q", name, err, want)
		}
	}
	if err := p.Unprepare(t.Context(), []*drapbv1.Claim{{Namespace: "ns", Name: "c1", Uid: "u1"}}); err != nil {
		t.Errorf("Unprepare: %v", err)
	}
	if _, err := m.Get("other.example.com"); err == nil || err.Error() != "DRA driver other.example.com is not registered" {
		t.Errorf("Get of an unknown driver: %v", err)
	}

	// The registration socket goes: the driver is deregistered.
	m.mu.Lock()
	changed := m.changed
	m.mu.Unlock()
	os.Remove(filepath.Join(dir, "reg", "net.example.com-reg.sock"))
	<-changed
	if _, err := m.Get("net.example.com"); err == nil {
		t.Error("driver still registered after its registration socket was removed")
	}
}

func TestV1beta1Only(t *testing.T) {
	dir, m := start(t)
	plugin(t, dir, "old.example.com", registerapi.DRAPlugin, []string{drapbv1beta1.DRAPluginService}, &draServer{})
	p, err := m.Wait(t.Context(), "old.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if p.Service != drapbv1beta1.DRAPluginService {
		t.Fatalf("chose %s", p.Service)
	}
	res, err := p.Prepare(t.Context(), []*drapbv1.Claim{{Namespace: "ns", Name: "c1", Uid: "u1"}})
	if err != nil || res["u1"].GetDevices()[0].GetDeviceName() != "c1" {
		t.Fatalf("Prepare through v1beta1 = %v, %v", res, err)
	}
}

func TestRegistrationRejected(t *testing.T) {
	dir, m := start(t)
	for _, tc := range []struct {
		driver, typ string
		services    []string
		want        string
	}{
		{"csi.example.com", registerapi.CSIPlugin, []string{"1.0.0"}, "no handler registered for plugin type: CSIPlugin"},
		{"v2.example.com", registerapi.DRAPlugin, []string{"v2.DRAPlugin"}, "none of services supported by the plugin"},
		{"none.example.com", registerapi.DRAPlugin, nil, "empty list of supported gRPC services"},
	} {
		reg := plugin(t, dir, tc.driver, tc.typ, tc.services, &draServer{})
		if st := status(t, reg); st.PluginRegistered || !strings.Contains(st.Error, tc.want) {
			t.Errorf("%s: status %+v, want refused with %q", tc.driver, st, tc.want)
		}
		if _, err := m.Get(tc.driver); err == nil {
			t.Errorf("%s registered", tc.driver)
		}
	}
}

// A socket there before Start (a kubelet restart) is registered.
func TestSocketsPresentAtStartRegister(t *testing.T) {
	dir, err := os.MkdirTemp("", "drap")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Mkdir(filepath.Join(dir, "reg"), 0o750); err != nil {
		t.Fatal(err)
	}
	reg := plugin(t, dir, "net.example.com", registerapi.DRAPlugin, []string{drapbv1.DRAPluginService}, &draServer{})
	m, err := Start(filepath.Join(dir, "reg"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := m.Wait(ctx, "net.example.com"); err != nil {
		t.Fatal(err)
	}
	if st := status(t, reg); !st.PluginRegistered {
		t.Errorf("status %+v", st)
	}
}
