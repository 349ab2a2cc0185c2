package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/plugin"
)

// A kubeconfig whose client cannot be built is tried again on the next call
// (a fixed file must not wait for an agent restart); a built client is kept
// while the file's content stays, and a missing file is the builder's to name.
func TestKubeClientBuiltAgainAfterFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	builds, fail := 0, true
	k := &kubeCache{log: quiet(), build: func(string, time.Duration, *slog.Logger) (plugin.Kube, error) {
		builds++
		if fail {
			return nil, errors.New("cannot parse kubeconfig")
		}
		return &statusKube{}, nil
	}}
	for range 2 {
		if _, err := k.get(path, time.Second, nil); err == nil {
			t.Fatal("a failed build was kept")
		}
	}
	fail = false
	first, err := k.get(path, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := k.get(path, time.Second, nil); err != nil || again != first || builds != 3 {
		t.Errorf("second get: %v, same client %v, builds %d: want the kept client after 3 builds", err, again == first, builds)
	}
	if _, err := k.get(filepath.Join(t.TempDir(), "none"), time.Second, nil); err != nil || builds != 4 {
		t.Errorf("missing kubeconfig: %v after %d builds, want the builder asked", err, builds)
	}
}

// Spellings of one kubeconfig path are one client, and no number of other
// kubeconfigs flushes every client: the oldest goes first, one at a time.
func TestKubeClientsByFileNotSpelling(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kc")
	if err := os.WriteFile(path, []byte("kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	builds := 0
	k := &kubeCache{log: quiet(), build: func(string, time.Duration, *slog.Logger) (plugin.Kube, error) {
		builds++
		return &statusKube{}, nil
	}}
	first, err := k.get(path, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, spelling := range []string{dir + "//kc", dir + "///kc", dir + "/./kc", dir + "/../" + filepath.Base(dir) + "/kc"} {
		if c, err := k.get(spelling, time.Second, nil); err != nil || c != first {
			t.Fatalf("%s: %v, same client %v", spelling, err, c == first)
		}
	}
	if builds != 1 {
		t.Fatalf("%d builds for one file in five spellings, want 1", builds)
	}
	for i := range 2 * maxKubeconfigs {
		other := filepath.Join(dir, fmt.Sprint("other", i))
		if err := os.WriteFile(other, []byte("kubeconfig"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := k.get(other, time.Second, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := k.get(path, time.Second, nil); err != nil {
			t.Fatal(err)
		}
	}
	if builds != 1+2*maxKubeconfigs || len(k.clients) > maxKubeconfigs {
		t.Errorf("%d builds, %d clients kept: the node's client, used between the others, was dropped", builds, len(k.clients))
	}
}
