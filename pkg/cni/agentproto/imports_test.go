package agentproto

import (
	"os/exec"
	"strings"
	"testing"
)

// The entry point links this package and must start as fast as the bridge
// plugin: nothing beyond the standard library, golang.org/x/sys/unix and the
// CNI library (no client-go, no gRPC, not even devplumb's own packages, whose
// imports may grow), but pkg/base/unixsock, whose own imports this test
// checks with the rest (go list -deps).
func TestImportsStayLight(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const self = "github.com/devplumb/devplumb/pkg/cni/agentproto"
	const unixsock = "github.com/devplumb/devplumb/pkg/base/unixsock"
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != self {
		t.Fatalf("go list -deps printed %q, want it to end with %s", deps, self)
	}
	for _, d := range deps {
		if d != self && d != "golang.org/x/sys/unix" && d != unixsock && !strings.HasPrefix(d, "github.com/containernetworking/cni/") {
			t.Errorf("agentproto imports %s: only the standard library, golang.org/x/sys/unix, github.com/containernetworking/cni and pkg/base/unixsock are allowed", d)
		}
	}
}
