package deviceplugin_test

import (
	"context"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// A minimal device plugin (compiled, not run: it needs a kubelet): two devices on NUMA node 0, an env var per
// allocation, served until SIGTERM. Call Update again whenever devices come,
// go or change health.
func Example() {
	srv, err := deviceplugin.New(deviceplugin.Config{
		ResourceName: "example.com/widget",
		Allocate: func(_ context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
			return &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"WIDGETS": ids[0]}}, nil
		},
	})
	if err != nil {
		slog.Error("bad config", "err", err)
		return
	}
	srv.Update([]deviceplugin.Device{
		{ID: "w0", Healthy: true, NUMANode: 0},
		{ID: "w1", Healthy: true, NUMANode: 0},
	})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// Serves, registers with the kubelet (again after each kubelet restart)
	// and removes its socket when ctx ends.
	if err := srv.Run(ctx); err != nil {
		slog.Error("device plugin failed", "err", err)
	}
}
