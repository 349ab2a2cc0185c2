package podresourcesserver_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

type empty struct{}

func (empty) ListPods() []*v1.PodResources                   { return nil }
func (empty) GetPod(string, string) (*v1.PodResources, bool) { return nil, false }
func (empty) Allocatable() *v1.AllocatableResourcesResponse {
	return &v1.AllocatableResourcesResponse{}
}

func client(t *testing.T, socket string) v1.PodResourcesListerClient {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return v1.NewPodResourcesListerClient(conn)
}

func TestStaleSocketReplacedOtherFilesRefused(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "kubelet.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close() // a stale socket, as a killed kubelet leaves
	s, err := podresourcesserver.Start(sock, empty{}, podresourcesserver.Config{})
	if err != nil {
		t.Fatalf("Start over a stale socket: %v", err)
	}
	// The kubelet's text and code for an unknown pod.
	_, err = client(t, sock).Get(t.Context(), &v1.GetPodResourcesRequest{PodNamespace: "ns", PodName: "p"})
	if status.Code(err) != codes.Unknown || !strings.HasSuffix(status.Convert(err).Message(), "pod p in namespace ns not found") {
		t.Errorf("Get unknown pod = %v", err)
	}
	s.Stop()

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := podresourcesserver.Start(file, empty{}, podresourcesserver.Config{}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Start over a regular file = %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Fatal("regular file was touched")
	}
}

func TestGetModes(t *testing.T) {
	for mode, want := range map[podresourcesserver.GetMode]codes.Code{podresourcesserver.GetDisabled: codes.Unknown, podresourcesserver.GetUnimplemented: codes.Unimplemented} {
		sock := filepath.Join(t.TempDir(), "kubelet.sock")
		s, err := podresourcesserver.Start(sock, empty{}, podresourcesserver.Config{GetMode: mode, NoRateLimit: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = client(t, sock).Get(t.Context(), &v1.GetPodResourcesRequest{})
		if status.Code(err) != want {
			t.Errorf("mode %d: Get = %v, want code %v", mode, err, want)
		}
		if mode == podresourcesserver.GetDisabled && status.Convert(err).Message() != podresourcesserver.GetDisabledMessage {
			t.Errorf("disabled Get message %q", status.Convert(err).Message())
		}
		s.Stop()
	}
}
