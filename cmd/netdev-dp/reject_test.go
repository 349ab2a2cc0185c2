package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// rejectingKubelet answers every registration with an error, as a kubelet
// does for an API version or resource name it does not accept.
type rejectingKubelet struct {
	pluginapi.UnimplementedRegistrationServer
}

func (rejectingKubelet) Register(context.Context, *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	return nil, errors.New("this kubelet refuses example.com/vhu")
}

// TestRegistrationRejectedExitsNonZero: a plugin the kubelet refuses stops
// with exit code 1 and the kubelet's reason, and leaves nothing behind.
func TestRegistrationRejectedExitsNonZero(t *testing.T) {
	pluginDir, sockDir, work := t.TempDir(), t.TempDir(), t.TempDir()
	lis, err := net.Listen("unix", filepath.Join(pluginDir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, rejectingKubelet{})
	go srv.Serve(lis)
	defer srv.Stop()
	config := vhostUserSetup(t, sockDir, work, "a.sock")
	devinfoDir, cdiDir := filepath.Join(work, "devinfo"), filepath.Join(work, "cdi")
	var stderr bytes.Buffer
	pr := podresourcestest.NewServer(t) // no pod holds a device: everything goes
	code := run([]string{"--config", config, "--plugin-dir", pluginDir, "--devinfo-dir", devinfoDir, "--cdi-dir", cdiDir,
		"--pod-resources-socket", pr.Socket}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "kubelet rejected the registration") ||
		!strings.Contains(stderr.String(), "this kubelet refuses example.com/vhu") {
		t.Fatalf("exit code %d, want 1 with the kubelet's reason; stderr:\n%s", code, stderr.String())
	}
	for _, dir := range []string{filepath.Join(devinfoDir, "dp"), cdiDir} {
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s not empty after the rejection: %v", dir, entries)
		}
	}
	if entries, _ := os.ReadDir(pluginDir); len(entries) != 1 {
		t.Errorf("plugin dir after the rejection: %v, want only kubelet.sock", entries)
	}
}
