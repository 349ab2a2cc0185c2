package kubeletsim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/kubeletsim/kubeletsimtest"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestDeadPluginDevicesDroppedAfterGrace: like the kubelet, a plugin whose
// stream broke keeps its devices (unhealthy) only for the grace period; then
// the resource leaves the node, and a plugin registering again brings it back.
func TestDeadPluginDevicesDroppedAfterGrace(t *testing.T) {
	n, err := kubeletsim.StartWithOptions(t.Context(), root(t), quiet(),
		kubeletsim.Options{PluginGracePeriod: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("d1"))
	p.Start(t.Context(), false)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	if err := n.WaitResources(t.Context(), func(r map[string][]kubeletsim.Device) bool {
		_, listed := r[vf]
		return !listed
	}); err != nil {
		t.Fatal(err)
	}
	again := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf2.sock", kubeletsimtest.Dev("d1"))
	again.Start(t.Context(), false)
	if err := n.WaitResources(t.Context(), func(r map[string][]kubeletsim.Device) bool {
		return healthOf(r[vf], "d1") == pluginapi.Healthy
	}); err != nil {
		t.Fatal(err)
	}
}

func TestNegativeGracePeriodRefused(t *testing.T) {
	if _, err := kubeletsim.StartWithOptions(t.Context(), root(t), quiet(),
		kubeletsim.Options{PluginGracePeriod: -time.Second}); err == nil {
		t.Fatal("negative grace period accepted")
	}
}

// TestSecondNodeOnServedRootRefused: a second node on a root that a running
// node serves must fail clearly instead of taking its sockets away.
func TestSecondNodeOnServedRootRefused(t *testing.T) {
	dir := root(t)
	n := startNode(t, dir)
	_, err := kubeletsim.Start(t.Context(), dir, quiet())
	if err == nil || !strings.Contains(err.Error(), "another nodesim is serving it") {
		t.Fatalf("second Start on a served root: %v", err)
	}
	c, err := kubeletsim.NewControlClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pods(t.Context()); err != nil {
		t.Fatalf("first node no longer answers: %v", err)
	}
	n.Stop()
	again := startNode(t, dir) // a stopped node's root is free again
	again.Stop()
}

// TestWaitResourcesCondMayCallNode: a condition that asks the node more
// (Registered, Pods) must not deadlock on the node's lock.
func TestWaitResourcesCondMayCallNode(t *testing.T) {
	n := startNode(t, root(t))
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("d1"))
	p.Start(t.Context(), false)
	if err := n.WaitResources(t.Context(), func(r map[string][]kubeletsim.Device) bool {
		return len(r[vf]) == 1 && n.Registered(vf) && len(n.Pods()) == 0
	}); err != nil {
		t.Fatal(err)
	}
}
