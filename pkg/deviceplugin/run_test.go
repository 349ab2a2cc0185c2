package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestRejectedRegistrationEndsRun: a kubelet that refuses the registration
// makes Run return ErrRegistrationRejected with the kubelet's reason, and the
// socket is removed, instead of a plugin waiting forever unregistered.
func TestRejectedRegistrationEndsRun(t *testing.T) {
	dir := t.TempDir()
	k := startFakeRejecting(t, dir, true, fmt.Errorf("invalid resource name"))
	s := newTestServer(t, dir)
	err := s.Run(context.Background())
	if !errors.Is(err, ErrRegistrationRejected) || !strings.Contains(err.Error(), "invalid resource name") {
		t.Fatalf("Run: got %v, want ErrRegistrationRejected with the kubelet's reason", err)
	}
	if n := len(k.regs); n != rejectAttempts {
		t.Errorf("%d registration attempts, want %d", n, rejectAttempts)
	}
	if _, err := os.Stat(s.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after a rejected registration: %v", err)
	}
	if err := s.Run(context.Background()); err == nil {
		t.Fatal("second Run accepted")
	}
}

// TestServesAgainAfterPluginDirRecreated: removing the whole device plugin
// directory (a kubelet root wiped and recreated) must not leave the plugin
// deaf: it serves and registers again once the directory and kubelet.sock
// are back.
func TestServesAgainAfterPluginDirRecreated(t *testing.T) {
	dir := t.TempDir() + "/device-plugins"
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	k := startFakeKubelet(t, dir)
	s := newTestServer(t, dir)
	runServer(t, s)
	k.waitRegistration(t)
	k.stop()
	// As rm -rf of a live kubelet root: the plugin, seeing its socket go, serves
	// again in the directory being emptied, so the final rmdir may find that new
	// socket; rm goes on until the directory is gone (then the plugin cannot listen).
	var err error
	for i := 0; i < 50; i++ {
		if err = os.RemoveAll(dir); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	k2 := startFakeKubelet(t, dir)
	// The plugin may register once more while it follows the events of the
	// recreation (its socket replaced under a call): the last registration
	// must lead to a serving plugin.
	for {
		r := k2.waitRegistration(t)
		c := dialPlugin(t, dir, r.Endpoint)
		_, err := c.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{}, grpc.WaitForReady(true))
		if err == nil {
			return
		}
		t.Logf("plugin not serving after registration (another should follow): %v", err)
	}
}

// TestStaleKubeletSockEventsDoNotRegisterAgain: the events of a kubelet
// restart may be handled after the plugin registered with the new kubelet
// (its socket's removal came first). The removal and creation of
// kubelet.sock that follow are stale then: a second registration of the
// socket is what kubelet 1.37 refuses, forgetting the first. The events are
// handed in over an unchanged kubelet.sock.
func TestStaleKubeletSockEventsDoNotRegisterAgain(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	s := newTestServer(t, dir)
	l := &loop{s: s}
	defer l.shutdown()
	ctx := context.Background()
	if err := l.restart(ctx); err != nil {
		t.Fatal(err)
	}
	k.waitRegistration(t)
	for _, op := range []fsnotify.Op{fsnotify.Remove, fsnotify.Create} {
		if err := l.inDir(ctx, fsnotify.Event{Name: s.kubeletSock, Op: op}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Registrations(); n != 1 {
		t.Fatalf("%d registrations with one kubelet.sock, want 1", n)
	}
	if !s.Registered() {
		t.Fatal("a stale removal of kubelet.sock made the plugin unregistered")
	}
	// A kubelet.sock bound anew (same path, maybe the same inode number) is
	// another kubelet: its creation registers.
	k.stop()
	startFake(t, dir, false)
	if err := l.inDir(ctx, fsnotify.Event{Name: s.kubeletSock, Op: fsnotify.Create}); err != nil {
		t.Fatal(err)
	}
	if n := s.Registrations(); n != 2 {
		t.Fatalf("%d registrations, want 2: one at start, one for the new kubelet.sock", n)
	}
}

// TestSecondPluginOnLiveSocketRefused: a second instance for the same
// socket must not remove the live one's socket (they would take turns
// removing each other's forever); it fails with a clear error.
func TestSecondPluginOnLiveSocketRefused(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	first := newTestServer(t, dir)
	runServer(t, first)
	r := k.waitRegistration(t)
	second := newTestServer(t, dir)
	err := second.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "another plugin is serving") {
		t.Fatalf("second Run: %v", err)
	}
	c := dialPlugin(t, dir, r.Endpoint)
	if _, err := c.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{}); err != nil {
		t.Fatalf("first plugin no longer serving: %v", err)
	}
}
