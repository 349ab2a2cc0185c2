// Package testenv is the unit layer's test-helper package (e2e/e2etest is the
// end-to-end layer's). It builds the real binaries that tests run: the CNI plugins
// and cnitool at the versions pinned in go.mod, and devplumb's own commands; it
// makes what tests need on the host (veth pairs, network namespaces: host.go) and
// lists directories one way (Files); and it serialises the packages that use the
// kubelet's fixed host paths (hostlock.go).
//
// Binaries go into one directory per user and checkout (or $DEVPLUMB_TESTBIN), so
// the Go build cache makes every build after the first cheap, and test
// packages running in parallel share the result under a file lock.
package testenv

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// CNIPluginPackages are the delegates and tools the tests use.
var CNIPluginPackages = []string{
	"github.com/containernetworking/plugins/plugins/main/host-device",
	"github.com/containernetworking/plugins/plugins/main/macvlan",
	"github.com/containernetworking/plugins/plugins/main/bridge",
	"github.com/containernetworking/plugins/plugins/ipam/host-local",
	"github.com/containernetworking/plugins/plugins/ipam/static",
	"github.com/containernetworking/cni/cnitool",
}

var (
	mu    sync.Mutex
	built = map[string]bool{}
)

// CNIPlugins builds the CNI plugins and cnitool and returns their directory.
func CNIPlugins(t testing.TB) string {
	return Build(t, CNIPluginPackages...)
}

// Build builds the given main packages (import paths; "./cmd/x" is taken
// relative to the module root) into the shared binary directory and returns
// that directory. Each binary is named after the last element of its path.
// "./cmd/devplumb", the CNI entry point, comes with "./cmd/devplumb-direct"
// beside it, as it is installed: without an agent the entry point execs it,
// so every test running devplumb runs the whole path.
func Build(t testing.TB, pkgs ...string) string {
	t.Helper()
	return BuildTagged(t, "", pkgs...)
}

// BuildTagged is Build with `go build -tags tags`, into a subdirectory of
// Build's named after the tags, so tagged binaries (failpoints) never
// replace the normal ones.
func BuildTagged(t testing.TB, tags string, pkgs ...string) string {
	t.Helper()
	pkgs = withDirect(pkgs)
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if tags != "" {
		dir = filepath.Join(dir, "tags-"+strings.ReplaceAll(tags, ",", "-"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var todo []string
	for _, p := range pkgs {
		if !built[tags+" "+p] {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		return dir
	}
	if err := buildLocked(dir, tags, todo); err != nil {
		t.Fatal(err)
	}
	for _, p := range todo {
		built[tags+" "+p] = true
	}
	return dir
}

// withDirect adds devplumb-direct to pkgs holding the entry point.
func withDirect(pkgs []string) []string {
	const entry, direct = "./cmd/devplumb", "./cmd/devplumb-direct"
	if slices.Contains(pkgs, entry) && !slices.Contains(pkgs, direct) {
		return append(slices.Clone(pkgs), direct)
	}
	return pkgs
}

// BinDir is where Build puts binaries: one directory per user and checkout,
// so tests of two checkouts on one machine never run each other's builds.
func BinDir() (string, error) {
	d := os.Getenv("DEVPLUMB_TESTBIN")
	if d == "" {
		d = binDirFor(os.Getuid(), ModuleRoot())
	}
	return d, os.MkdirAll(d, 0o755)
}

func binDirFor(uid int, root string) string {
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(os.TempDir(), fmt.Sprintf("devplumb-testbin-%d-%x", uid, sum[:6]))
}

// ModuleRoot is the directory holding go.mod, found from this source file.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// buildLocked runs one `go build` per package under an exclusive file lock,
// so parallel test processes never write the same binary at once.
func buildLocked(dir, tags string, pkgs []string) error {
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("open build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	for _, p := range pkgs {
		out := filepath.Join(dir, path.Base(p))
		cmd := exec.Command("go", "build", "-tags", tags, "-o", out, p)
		cmd.Dir = ModuleRoot()
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", p, err, strings.TrimSpace(string(msg)))
		}
	}
	return nil
}
