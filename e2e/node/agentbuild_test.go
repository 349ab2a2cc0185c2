package node_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/images"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// skewBuild is the build version stamped into the skewed entry point.
const skewBuild = "v0.0.0-skew"

var protocolConst = regexp.MustCompile(`(?m)^const ProtocolVersion = (\d+)$`)

// skewedEntryPoint builds cmd/devplumb from this source with agentproto.ProtocolVersion one
// higher (a go build overlay of messages.go), stamped skewBuild, and returns the binary.
func skewedEntryPoint(t *testing.T) string {
	t.Helper()
	root, dir := testenv.ModuleRoot(), t.TempDir()
	msgs := filepath.Join(root, "pkg", "cni", "agentproto", "messages.go")
	src, err := os.ReadFile(msgs)
	e2etest.Must(t, err)
	m := protocolConst.FindSubmatch(src)
	if m == nil {
		t.Fatalf("%s: no line `const ProtocolVersion = N` to change", msgs)
	}
	var v int
	_, err = fmt.Sscan(string(m[1]), &v)
	e2etest.Must(t, err)
	patched := filepath.Join(dir, "messages.go")
	e2etest.Must(t, os.WriteFile(patched, protocolConst.ReplaceAll(src, fmt.Appendf(nil, "const ProtocolVersion = %d", v+1)), 0o644))
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {msgs: patched}})
	e2etest.Must(t, err)
	e2etest.Must(t, os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644))
	out := filepath.Join(dir, "devplumb")
	cmd := exec.Command("go", "build", "-trimpath", "-overlay", filepath.Join(dir, "overlay.json"),
		"-ldflags", "-X github.com/devplumb/devplumb/pkg/base/version.version="+skewBuild, "-o", out, "./cmd/devplumb")
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the skewed entry point: %v\n%s", err, b)
	}
	return out
}

// useEntryPoint makes bin the node's /opt/cni/bin/devplumb until the test ends, when the
// installer's is back. Each swap is a rename: a runtime never runs half a binary.
func useEntryPoint(t *testing.T, bin string) {
	t.Helper()
	dst := nd.HostPath("/opt/cni/bin/devplumb")
	aside := filepath.Join(nd.Dir, "devplumb.aside")
	tmp := nd.HostPath("/opt/cni/bin/.devplumb.e2e")
	e2etest.Must(t, copyExec(bin, tmp))
	e2etest.Must(t, os.Link(dst, aside))
	t.Cleanup(func() { e2etest.Must(t, os.Rename(aside, dst)) })
	e2etest.Must(t, os.Rename(tmp, dst))
}

// capDACOverride is the capability that gets a non-root process past the socket's mode.
const capDACOverride = unix.CAP_DAC_OVERRIDE

// agentPeer builds e2e/node/agentpeer where user nobody may run it.
func agentPeer(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "devplumb-agentpeer-")
	e2etest.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	e2etest.Must(t, os.Chmod(dir, 0o755))
	e2etest.Must(t, images.GoBuild(testenv.ModuleRoot(), dir, "./e2e/node/agentpeer"))
	return filepath.Join(dir, "agentpeer")
}

// runAsNobody runs peer against the agent's socket as uid and gid 65534 with the given
// ambient capabilities, and returns what it printed.
func runAsNobody(t *testing.T, peer string, caps ...uintptr) string {
	t.Helper()
	cmd := exec.Command(peer, agentSocket())
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}},
		AmbientCaps: caps,
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agentpeer as nobody (capabilities %v): %v\n%s", caps, err, out)
	}
	return strings.TrimSpace(string(out))
}
