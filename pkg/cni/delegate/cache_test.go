package delegate

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/devplumb/devplumb/pkg/base/libcnicache"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// DEL leaves no empty libcni cache directories behind, but never prunes
// while an ADD holds the cache (it may be writing into it) or while other
// attachments of the network are cached. Real host-local plugin, real netns.
func TestDelPrunesEmptyCacheDirs(t *testing.T) {
	cniPath := testenv.CNIPlugins(t)
	state := t.TempDir()
	netns := testenv.NetNS(t)
	list, err := ListFromBytes([]byte(`{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"host-local",` +
		`"ipam":{"type":"host-local","subnet":"10.254.8.0/24","dataDir":"` + t.TempDir() + `"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	inv := New(cniPath, CacheDir(state, "net"))
	ctx := context.Background()
	rt := func(cid string) *libcni.RuntimeConf {
		return &libcni.RuntimeConf{ContainerID: cid, IfName: "net1", NetNS: netns.Path()}
	}
	for _, cid := range []string{"a", "b"} {
		if _, err := inv.Add(ctx, list, rt(cid)); err != nil {
			t.Fatal(err)
		}
	}
	results := filepath.Join(CacheDir(state, "net"), "results")
	mustDel := func(cid string) {
		t.Helper()
		if err := inv.Del(ctx, list, rt(cid)); err != nil {
			t.Fatal(err)
		}
	}
	mustDel("a")
	if _, err := os.Stat(results); err != nil {
		t.Fatalf("results dir pruned while b is cached: %v", err)
	}
	unlock, err := libcnicache.Lock(inv.cacheDir, false) // an ADD in progress
	if err != nil {
		t.Fatal(err)
	}
	mustDel("b")
	if _, err := os.Stat(results); err != nil {
		t.Fatalf("results dir pruned while an ADD held the cache: %v", err)
	}
	unlock()
	mustDel("b") // DEL again (the runtime may repeat it) prunes now
	if _, err := os.Stat(CacheDir(state, "net")); !os.IsNotExist(err) {
		t.Fatalf("empty cache dir of the network left: %v", err)
	}
}
