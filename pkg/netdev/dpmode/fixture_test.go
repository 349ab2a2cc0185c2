package dpmode

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// fixture is one node (netdevtest.Node) with a kubelet emulator whose
// device plugin dir is the config's.
type fixture struct {
	*netdevtest.Node
	t         *testing.T
	root      string // kubelet root
	node      *kubeletsim.Node
	witnesses int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{Node: netdevtest.New(t, testenv.VethPair(t, "dpt")), t: t, root: t.TempDir()}
	f.startNode()
	f.Config.PluginDir = f.node.PluginDir()
	f.Config.PodResourcesSocket = f.node.PodResourcesSocket() // asked at stop and when devices left
	return f
}

func (f *fixture) startNode() {
	f.t.Helper()
	node, err := kubeletsim.Start(context.Background(), f.root, slog.Default())
	if err != nil {
		f.t.Fatal(err)
	}
	f.node = node
	f.t.Cleanup(func() { f.node.Stop() })
}

// run starts the daemon in-process; the returned stop cancels it and
// returns Run's error.
func (f *fixture) run() (stop func() error) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, f.Config, nil, slog.Default()) }()
	var result error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-done
		}
		return result
	}
	f.t.Cleanup(func() { stop() })
	f.waitRegistered(netdevtest.ResVF, netdevtest.ResVeth, netdevtest.ResVhost, netdevtest.ResVDPA)
	return stop
}

func (f *fixture) waitRegistered(resources ...string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, r := range resources {
		if err := f.node.WaitRegistered(ctx, r); err != nil {
			f.t.Fatal(err)
		}
	}
}

// waitNode waits for the kubelet's view to satisfy cond.
func (f *fixture) waitNode(what string, cond func(map[string][]kubeletsim.Device) bool) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.node.WaitResources(ctx, cond); err != nil {
		f.t.Fatalf("%s: %v; node has %+v", what, err, f.node.Resources())
	}
}
