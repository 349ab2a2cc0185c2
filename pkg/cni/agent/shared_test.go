package agent

import (
	"errors"
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
