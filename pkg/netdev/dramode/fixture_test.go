package dramode

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/vishvananda/netlink"
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
	return &fixture{Node: netdevtest.New(t, vethPair(t)), t: t, pluginsDir: t.TempDir()}
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

// vethPair creates a veth pair with unique names and removes it at the end.
func vethPair(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	prefix := "drt" + hex.EncodeToString(b)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: prefix + "a"}, PeerName: prefix + "b"}); err != nil {
		t.Fatalf("create veth pair %s: %v", prefix, err)
	}
	t.Cleanup(func() {
		for _, n := range []string{prefix + "a", prefix + "b"} {
			if l, err := netlink.LinkByName(n); err == nil {
				netlink.LinkDel(l)
			}
		}
	})
	return prefix
}

// files lists a directory recursively (files only), relative names.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	return out
}
