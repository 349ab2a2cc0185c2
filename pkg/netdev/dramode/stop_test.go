package dramode

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
)

// TestStopKeepsPreparedClaims is a DaemonSet update in DRA mode: Run stops (SIGTERM
// ends its context) while a claim is prepared; its device-info file and CDI spec
// entry stay, a device no claim holds has neither, and the next run adopts the
// claim from its checkpoint and prepares another one besides.
func TestStopKeepsPreparedClaims(t *testing.T) {
	f := newFixture(t)
	opts := Options{NodeName: node, PluginsDir: f.pluginsDir, RegistrarDir: t.TempDir(), Client: fake.NewClientset()}
	d, err := New(f.Config, opts, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	waitFor(t, "the DRA socket", func() bool {
		_, err := os.Stat(filepath.Join(f.pluginsDir, DefaultDriverName, "dra.sock"))
		return err == nil
	})
	c := claim("net", node, "vdpa0")
	first := prepare(t, d, c)[c.UID]
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	want := cdiNames(first)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after stop: %v", err)
	}
	store := devinfo.NewStore(f.DevInfoDir)
	if _, err := store.ReadDP(netdevtest.ResVDPA, "vdpa0"); err != nil {
		t.Errorf("device-info of the prepared claim's device after stop: %v", err)
	}
	if _, err := store.ReadDP(netdevtest.ResVF, "0000:01:01.3"); err == nil {
		t.Error("device-info of a device no claim holds")
	}
	if got := cdiCache(t, f.CDIDir).ListDevices(); !slices.Equal(got, want) {
		t.Errorf("CDI devices after stop %v, want the claim's %v", got, want)
	}

	d2, err := New(f.Config, opts, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.sync(); err != nil {
		t.Fatal(err)
	}
	if again := prepare(t, d2, c)[c.UID]; again.Err != nil || !slices.Equal(cdiNames(again), want) {
		t.Errorf("the next run answers %v %v for the adopted claim, want %v", again.Err, cdiNames(again), want)
	}
	other := claim("other", node, DeviceName(netdevtest.ResVF, "0000:01:01.3"))
	if err := prepare(t, d2, other)[other.UID].Err; err != nil {
		t.Fatalf("a new claim after the restart: %v", err)
	}
	if _, err := store.ReadDP(netdevtest.ResVF, "0000:01:01.3"); err != nil {
		t.Errorf("device-info of the new claim's device: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
