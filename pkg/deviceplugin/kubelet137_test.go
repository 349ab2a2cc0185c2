package deviceplugin

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
)

// TestSurvivesKubelet137Restart: the kubelet emulator restarts as kubelet
// 1.37 does (the old kubelet.sock stays until the new kubelet's cleanup,
// which removes the plugin's socket first) and, like 1.37, refuses a second
// registration of a socket it is connected to and then never disconnects the
// live one. The plugin must register with the new kubelet exactly once and
// keep serving: a pod is admitted and a device added afterwards is advertised.
func TestSurvivesKubelet137Restart(t *testing.T) {
	root, err := os.MkdirTemp("", "dp137") // socket paths must stay short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	ctx := t.Context()
	node := startSim(t, root)
	s := newTestServer(t, node.PluginDir())
	s.Update([]Device{{ID: "d1", Healthy: true, NUMANode: NoNUMA}})
	stop := runServer(t, s)
	if err := node.WaitRegistered(ctx, testResource); err != nil {
		t.Fatal(err)
	}
	waitRegistrations(t, s, 1)
	node.Stop()
	node = startSim(t, root)
	if err := node.WaitRegistered(ctx, testResource); err != nil {
		t.Fatal(err)
	}
	waitRegistrations(t, s, 2)
	regs := s.Registrations()
	// A second registration, which the framework used to send within
	// milliseconds of the first (a stale kubelet.sock event), would show here.
	time.Sleep(500 * time.Millisecond)
	if n := s.Registrations() - regs; n != 0 {
		t.Errorf("%d more registrations with the same kubelet after the restart", n)
	}
	s.Update([]Device{{ID: "d1", Healthy: true, NUMANode: NoNUMA}, {ID: "d2", Healthy: true, NUMANode: NoNUMA}})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := node.WaitResources(wctx, func(r map[string][]kubeletsim.Device) bool { return len(r[testResource]) == 2 }); err != nil {
		t.Fatalf("device added after the restart not advertised: %v; kubelet has %+v", err, node.Resources())
	}
	p := kubeletsim.PodSpec{Namespace: "ns", Name: "p", Containers: []kubeletsim.ContainerSpec{{Name: "c",
		Requests: []kubeletsim.ResourceRequest{{Resource: testResource, Count: 2}}}}}
	if _, err := node.AddPod(ctx, p); err != nil {
		t.Fatalf("pod after the restart: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// waitRegistrations waits until the plugin counted n registrations: the
// kubelet knows a registration before the plugin has the kubelet's answer.
func waitRegistrations(t *testing.T, s *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.Registrations() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d registrations, want %d", s.Registrations(), n)
		}
	}
}

func startSim(t *testing.T, root string) *kubeletsim.Node {
	t.Helper()
	n, err := kubeletsim.Start(t.Context(), root, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// testResource is newTestServer's resource.
const testResource = "example.com/netdev"
