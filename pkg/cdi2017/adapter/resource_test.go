package adapter

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/cdi2017/devnodes"
	"github.com/devplumb/devplumb/pkg/cdi2017/devnodes/devnodestest"
	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
	"github.com/devplumb/devplumb/pkg/testenv"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// fixture is one resource over the built cdi-devnodes, not serving: its
// allocate and reconcile are called directly.
type fixture struct {
	t        *testing.T
	r        *resource
	nodes    devnodestest.Nodes
	devState string
}

func newFixture(t *testing.T, nodes, reserved int) *fixture {
	t.Helper()
	f := &fixture{t: t, nodes: devnodestest.New(t, nodes), devState: t.TempDir()}
	cfg := &Config{ConfDir: t.TempDir(), BinDir: testenv.Build(t, "./cmd/cdi-devnodes"), PluginDir: t.TempDir(),
		CDIDir: t.TempDir(), StateDir: t.TempDir()}
	cfg.defaults()
	devnodestest.WriteConfig(t, cfg.ConfDir, f.nodes.Config(reserved, f.devState, t.TempDir()))
	found, err := protocol.Discover(cfg.ConfDir)
	if err != nil {
		t.Fatal(err)
	}
	if f.r, err = newResource(cfg, found[0], slog.Default()); err != nil {
		t.Fatal(err)
	}
	if err := f.r.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) claims() map[string]devnodes.Claim {
	st, err := devnodes.ReadState(f.devState, "tty")
	if err != nil {
		f.t.Fatal(err)
	}
	return st.Requests
}

func (f *fixture) slots() []string {
	var out []string
	for _, d := range f.r.dp.Devices() {
		out = append(out, d.ID)
	}
	return out
}

// pods is a PodResources List answer with one pod holding slots.
func pods(slots ...string) []*v1.PodResources {
	return []*v1.PodResources{{Namespace: "ns", Name: "p", Containers: []*v1.ContainerResources{{Name: "c",
		Devices: []*v1.ContainerDevices{{ResourceName: "cdi.devplumb.io/tty", DeviceIds: slots},
			{ResourceName: "example.com/other", DeviceIds: []string{"tty-5"}}}}}}}
}

func TestSlotsFollowINFO(t *testing.T) {
	f := newFixture(t, 5, 1) // 4 free
	if got := f.slots(); !slices.Equal(got, []string{"tty-0", "tty-1", "tty-2", "tty-3"}) {
		t.Fatalf("slots %v", got)
	}
	resp, err := f.r.allocate(context.Background(), []string{"tty-1", "tty-3"})
	if err != nil {
		t.Fatal(err)
	}
	// Held slots stay, free ones fill up to INFO's count: still 4.
	if got := f.slots(); !slices.Equal(got, []string{"tty-0", "tty-1", "tty-2", "tty-3"}) {
		t.Errorf("slots after allocating 2 of 4: %v", got)
	}
	name := resp.GetCdiDevices()[0].GetName()
	reqID := strings.TrimPrefix(name, "cdi.devplumb.io/tty=")
	if resp.GetEnvs()["CDI_REQUEST_ID_TTY"] != reqID || len(resp.GetAnnotations()) != 1 {
		t.Errorf("response %v", resp)
	}
	for k, v := range resp.GetAnnotations() {
		if !strings.HasPrefix(k, "cdi.k8s.io/") || v != name {
			t.Errorf("annotation %s=%s", k, v)
		}
	}
	if c := f.claims()[reqID]; !slices.Equal(c.Devices, f.nodes.Devs(2, 3)) {
		t.Errorf("claims %v", f.claims())
	}
}

// TestReconcile: an allocation no pod ever showed is kept within grace;
// one seen and then gone is DELeted; one from before the start that no
// pod shows is DELeted at once.
func TestReconcile(t *testing.T) {
	f := newFixture(t, 4, 0)
	ctx := context.Background()
	f.r.allocate(ctx, []string{"tty-0"})
	f.r.allocate(ctx, []string{"tty-1", "tty-2"})
	f.r.reconcile(ctx, pods("tty-1", "tty-2"), time.Time{}, time.Hour)
	if len(f.claims()) != 2 {
		t.Fatalf("within grace: claims %v", f.claims())
	}
	f.r.reconcile(ctx, nil, time.Time{}, time.Hour)
	if c := f.claims(); len(c) != 1 {
		t.Fatalf("after the seen pod went: claims %v", c)
	}
	f.r.reconcile(ctx, nil, time.Now(), time.Hour) // a restart check
	if c := f.claims(); len(c) != 0 || len(f.r.allocs) != 0 {
		t.Fatalf("after the restart check: claims %v, allocations %v", c, f.r.allocs)
	}
	f.r.allocate(ctx, []string{"tty-3"})
	f.r.reconcile(ctx, nil, time.Time{}, 0)
	if c := f.claims(); len(c) != 0 {
		t.Fatalf("past grace: claims %v", c)
	}
	if got := f.slots(); len(got) != 4 {
		t.Errorf("slots %v", got)
	}
}

// TestFailedADD: an ADD the binary refuses leaves no record and no claim.
func TestFailedADD(t *testing.T) {
	f := newFixture(t, 2, 0)
	_, err := f.r.allocate(context.Background(), []string{"tty-0", "tty-1", "tty-9"})
	var e *protocol.Error
	if !errors.As(err, &e) || e.Code != devnodes.CodeNotEnough {
		t.Fatalf("ADD of 3 of 2: %v, want code %d", err, devnodes.CodeNotEnough)
	}
	if len(f.r.allocs) != 0 || len(f.claims()) != 0 {
		t.Errorf("allocations %v, claims %v", f.r.allocs, f.claims())
	}
	loaded, _ := f.r.state.load()
	if len(loaded) != 0 {
		t.Errorf("state %v", loaded)
	}
}

// TestDELRetried: a DEL that does not go through (the binary cannot be
// run) keeps the allocation, and the next reconcile DELs it.
func TestDELRetried(t *testing.T) {
	f := newFixture(t, 2, 0)
	ctx := context.Background()
	f.r.allocate(ctx, []string{"tty-0"})
	f.r.reconcile(ctx, pods("tty-0"), time.Time{}, time.Hour)
	good := f.r.bin.Path
	f.r.bin.Path = filepath.Join(t.TempDir(), "missing")
	f.r.reconcile(ctx, nil, time.Time{}, time.Hour)
	if len(f.r.allocs) != 1 || len(f.claims()) != 1 {
		t.Fatalf("after a failed DEL: allocations %v, claims %v", f.r.allocs, f.claims())
	}
	// The kubelet hands the slot out again meanwhile: the new allocation
	// gets it, the stale one is still retried.
	f.r.allocate(ctx, []string{"tty-0"}) // fails: the binary is missing
	f.r.bin.Path = good
	if _, err := f.r.allocate(ctx, []string{"tty-0"}); err != nil {
		t.Fatal(err)
	}
	f.r.reconcile(ctx, pods("tty-0"), time.Time{}, time.Hour)
	if len(f.r.allocs) != 1 || len(f.claims()) != 1 {
		t.Errorf("after the retry: allocations %v, claims %v", f.r.allocs, f.claims())
	}
}
