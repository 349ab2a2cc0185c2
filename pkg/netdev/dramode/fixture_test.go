package dramode

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/testenv"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// node is the pool's name, this node's.
const node = "node-a"

// fixture is one node's device sources (netdevtest.Node) and the dir the
// driver keeps its checkpoints in.
type fixture struct {
	*netdevtest.Node
	t          *testing.T
	pluginsDir string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return &fixture{Node: netdevtest.New(t, testenv.VethPair(t, "drt")), t: t, pluginsDir: t.TempDir()}
}

// driver makes a driver for the fixture (a run of netdev-dp) and scans once.
func (f *fixture) driver() *Driver {
	f.t.Helper()
	d, err := New(f.Config, Options{NodeName: node, PluginsDir: f.pluginsDir}, slog.Default())
	if err != nil {
		f.t.Fatal(err)
	}
	if err := d.sync(); err != nil {
		f.t.Fatal(err)
	}
	return d
}

// claim is an allocated claim holding the named devices of pool.
func claim(name, pool string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	alloc := &resourceapi.AllocationResult{}
	for i, dev := range devices {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: fmt.Sprintf("req%d", i), Driver: DefaultDriverName, Pool: pool, Device: dev,
		})
	}
	c.Status.Allocation = alloc
	return c
}
