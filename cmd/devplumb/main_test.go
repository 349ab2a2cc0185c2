package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
)

// The entry point answers VERSION, guards depth and runs delegates without
// linking pkg/cni/{config,delegate,plugin}: its copies must be theirs.
func TestCopiesAreConfigs(t *testing.T) {
	if !slices.Equal(supportedVersions, config.SupportedVersions) {
		t.Errorf("the entry point supports CNI %v, devplumb-direct %v", supportedVersions, config.SupportedVersions)
	}
	if shapeErrCode != plugin.ErrShape {
		t.Errorf("shaping error code %d, the plugin's %d", shapeErrCode, plugin.ErrShape)
	}
	if depthEnv != plugin.DepthEnv {
		t.Errorf("depth variable %s, the plugin's %s", depthEnv, plugin.DepthEnv)
	}
	if nodeconfig.DefaultStateDir != config.DefaultStateDir {
		t.Errorf("node config's default stateDir %s, config's %s", nodeconfig.DefaultStateDir, config.DefaultStateDir)
	}
	node, err := nodeconfig.Parse([]byte(`{"stateDir":"/tmp/s"}`))
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range map[*nodeconfig.Node]string{
		node:                  delegate.CacheDir("/tmp/s", "n1"),
		nodeconfig.Defaults(): delegate.CacheDir(config.DefaultStateDir, "n1"),
	} {
		if got := n.CacheDir("n1"); got != want {
			t.Errorf("cache dir of n1 under %s: %q, want %q", n.StateDir, got, want)
		}
	}
	if _, err := networkName([]byte(`{"stateDir":"/tmp/s"}`)); err == nil || !strings.Contains(err.Error(), "network name") {
		t.Errorf("a config without a name: %v, want an error naming the missing name", err)
	}
}

// The entry point starts about as fast as the bridge plugin only while it
// links little more: the standard library, golang.org/x/sys/unix, the CNI
// library (with what libcni itself links) and, of devplumb, only the agent
// protocol, the node config (to check the agent's answers), the version
// stamp, the libcni cache lock and safefile, and the shaping of a share (with
// the netlink library, whose packages the CNI plugins link too). Client-go, gRPC or any other devplumb
// package would put back the start-up the entry point exists to avoid.
func TestImportsStayLight(t *testing.T) {
	allowed := map[string]bool{
		"github.com/devplumb/devplumb/cmd/devplumb":         true,
		"github.com/devplumb/devplumb/pkg/cni/agentproto":   true,
		"github.com/devplumb/devplumb/pkg/base/version":     true,
		"github.com/devplumb/devplumb/pkg/base/libcnicache": true,
		"github.com/devplumb/devplumb/pkg/cni/nodeconfig":   true,
		"github.com/devplumb/devplumb/pkg/base/safefile":    true,
		"github.com/devplumb/devplumb/pkg/base/unixsock":    true,
		"golang.org/x/sys/unix":                             true,
	}
	// A share is shaped where its delegates run, here when the agent
	// serves the call: pkg/cni/shape and the netlink library it uses.
	for _, d := range goListDeps(t, "github.com/devplumb/devplumb/pkg/cni/shape") {
		allowed[d] = true
	}
	// What the CNI library links is the CNI library's (otel's propagation in
	// invoke, netns in skel): the bridge plugin pays it too.
	for _, d := range goListDeps(t, "github.com/containernetworking/cni/libcni", "github.com/containernetworking/cni/pkg/skel") {
		allowed[d] = true
	}
	deps := goListDeps(t, ".")
	if !slices.Contains(deps, "github.com/devplumb/devplumb/pkg/cni/agentproto") {
		t.Fatalf("go list -deps printed %q: the entry point's packages are missing", deps)
	}
	for _, d := range deps {
		if !allowed[d] || forbidden(d) {
			t.Errorf("the entry point links %s: only the standard library, golang.org/x/sys/unix, the CNI library, "+
				"pkg/cni/agentproto, pkg/cni/nodeconfig, pkg/cni/shape (with netlink), pkg/base/version, pkg/base/libcnicache, pkg/base/safefile and pkg/base/unixsock are allowed", d)
		}
	}
}

// forbidden are packages no CNI library version may bring in either.
func forbidden(pkg string) bool {
	for _, p := range []string{"k8s.io/", "google.golang.org/grpc", "github.com/prometheus/", "google.golang.org/protobuf"} {
		if strings.HasPrefix(pkg, p) {
			return true
		}
	}
	return strings.HasPrefix(pkg, "github.com/devplumb/devplumb/") &&
		!slices.Contains([]string{"cmd/devplumb", "pkg/cni/agentproto", "pkg/cni/nodeconfig", "pkg/cni/shape",
			"pkg/base/version", "pkg/base/libcnicache", "pkg/base/safefile", "pkg/base/unixsock"}, strings.TrimPrefix(pkg, "github.com/devplumb/devplumb/"))
}

// goListDeps are the non-standard packages pkgs link, themselves included.
func goListDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)...)
	cmd.Dir, _ = filepath.Abs(".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %v: %v", pkgs, err)
	}
	return strings.Fields(string(out))
}
