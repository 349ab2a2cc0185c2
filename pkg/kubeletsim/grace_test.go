package kubeletsim_test

import (
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
