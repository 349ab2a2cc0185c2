package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeKubelet is a minimal Registration server used until the shared kubelet
// emulator is available: it records requests and, like the kubelet, removes
// every other socket in the directory when it starts.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir  string
	srv  *grpc.Server
	regs chan *pluginapi.RegisterRequest
	// reject, when set, is the answer to every registration, as the kubelet
	// answers a bad version or resource name.
	reject error
}

func startFakeKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	return startFake(t, dir, true)
}

func startFake(t *testing.T, dir string, cleanDir bool) *fakeKubelet {
	t.Helper()
	return startFakeRejecting(t, dir, cleanDir, nil)
}

func startFakeRejecting(t *testing.T, dir string, cleanDir bool, reject error) *fakeKubelet {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if cleanDir {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	lis, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{dir: dir, srv: grpc.NewServer(), regs: make(chan *pluginapi.RegisterRequest, 16), reject: reject}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go k.srv.Serve(lis)
	t.Cleanup(k.stop)
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.regs <- r
	if k.reject != nil {
		return &pluginapi.Empty{}, k.reject
	}
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) stop() {
	k.srv.Stop()
	os.Remove(filepath.Join(k.dir, "kubelet.sock"))
}

// waitRegistration returns the next registration or fails the test.
func (k *fakeKubelet) waitRegistration(t *testing.T) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-k.regs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no registration")
		return nil
	}
}

// dialPlugin connects to a plugin socket like the kubelet does.
func dialPlugin(t *testing.T, dir, endpoint string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// runServer runs s until the test ends and returns a stop function that
// waits for Run to return.
func runServer(t *testing.T, s *Server) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	var runErr error
	done := make(chan struct{})
	go func() { runErr = s.Run(ctx); close(done) }()
	stop = func() error {
		once.Do(func() { cancel(); <-done })
		return runErr
	}
	t.Cleanup(func() { stop() })
	return stop
}
