package dramode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// TestHandleError: a recoverable background error (publishing slices) is only logged;
// any other stops Run with that error.
func TestHandleError(t *testing.T) {
	f := newFixture(t)
	d := f.driver()
	ctx, stop := context.WithCancelCause(context.Background())
	d.stop = stop
	d.HandleError(ctx, fmt.Errorf("slice rejected: %w", kubeletplugin.ErrRecoverable), "publish")
	if ctx.Err() != nil || d.fatalErr() != nil {
		t.Fatal("a recoverable error stopped the driver")
	}
	d.HandleError(ctx, errors.New("listener gone"), "DRA gRPC server failed")
	if err := d.fatalErr(); err == nil || !strings.Contains(err.Error(), "DRA gRPC server failed: listener gone") {
		t.Errorf("fatal error %v", err)
	}
	if !errors.Is(context.Cause(ctx), d.fatalErr()) {
		t.Errorf("Run's context not stopped with the error: %v", context.Cause(ctx))
	}
}

// TestLongAttributesLeftOut: a string longer than the API's 64 characters (a deep
// socket path) is left out and reported, the rest is kept.
func TestLongAttributesLeftOut(t *testing.T) {
	path := "/" + strings.Repeat("d", 80) + "/vhu0.sock"
	d := source.Device{Device: deviceplugin.Device{ID: "vhu0.sock", Healthy: true, NUMANode: deviceplugin.NoNUMA},
		Info: &devinfo.DeviceInfo{Type: devinfo.TypeVhostUser, VhostUser: &devinfo.VhostDevice{Mode: "client", Path: path}}}
	attrs, dropped := attributes(DefaultDriverName, "example.com/vhu", "vhostuser", "", d)
	if len(dropped) != 1 || dropped[0] != DefaultDriverName+"/"+AttrSocketPath {
		t.Errorf("dropped %v", dropped)
	}
	if _, ok := attrs[AttrDeviceID]; !ok || len(attrs) != 3 {
		t.Errorf("attributes %v", attrs)
	}
}
