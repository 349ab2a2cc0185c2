package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
)

// addPod admits a pod asking for one example.com/vhu device and returns its ID.
func (b *binNode) addPod(name string) string {
	b.t.Helper()
	alloc, err := b.node.AddPod(context.Background(), kubeletsim.PodSpec{Namespace: "ns", Name: name,
		Containers: []kubeletsim.ContainerSpec{{Name: "c", Requests: []kubeletsim.ResourceRequest{{Resource: "example.com/vhu", Count: 1}}}}})
	if err != nil {
		b.t.Fatal(err)
	}
	ids := alloc.Containers[0].Resources[0].DeviceIDs
	if len(ids) != 1 {
		b.t.Fatalf("pod %s got devices %v, want one", name, ids)
	}
	return ids[0]
}

// specDevices are the device names of the CDI spec of example.com/vhu; nil when
// there is no spec.
func (b *binNode) specDevices() []string {
	b.t.Helper()
	data, err := os.ReadFile(filepath.Join(b.cdiDir, "example.com-vhu.json"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		b.t.Fatal(err)
	}
	var spec struct{ Devices []struct{ Name string } }
	if err := json.Unmarshal(data, &spec); err != nil {
		b.t.Fatal(err)
	}
	var out []string
	for _, d := range spec.Devices {
		out = append(out, d.Name)
	}
	slices.Sort(out)
	return out
}

// stop sends SIGTERM and waits for a clean exit.
func (b *binNode) stop(cmd interface {
	Signal(os.Signal) error
	Wait() (*os.ProcessState, error)
}) {
	b.t.Helper()
	if err := cmd.Signal(syscall.SIGTERM); err != nil {
		b.t.Fatal(err)
	}
	if st, err := cmd.Wait(); err != nil || !st.Success() {
		b.t.Fatalf("exit after SIGTERM: %v %v", st, err)
	}
}

// checkFiles: the devices in want have their device-info file, the others none, and
// the CDI spec lists exactly want.
func (b *binNode) checkFiles(when string, want, gone []string) {
	b.t.Helper()
	for _, id := range want {
		if _, err := b.store.ReadDP("example.com/vhu", id); err != nil {
			b.t.Errorf("%s: device-info of %s: %v", when, id, err)
		}
	}
	for _, id := range gone {
		if _, err := b.store.ReadDP("example.com/vhu", id); err == nil {
			b.t.Errorf("%s: device-info of %s, which no pod holds, is still there", when, id)
		}
	}
	var names []string
	for _, id := range want {
		names = append(names, cdispec.DeviceName(id))
	}
	slices.Sort(names)
	if got := b.specDevices(); !slices.Equal(got, names) {
		b.t.Errorf("%s: CDI spec lists %v, want %v", when, got, names)
	}
}

// TestRolloutKeepsHeldDevices is a DaemonSet update: SIGTERM while a pod holds a
// device keeps that device's device-info file and CDI spec entry and removes the free
// device's; the next instance adopts them, and a pod admitted then gets its
// device-info and spec entry too; its SIGTERM keeps both held devices'.
func TestRolloutKeepsHeldDevices(t *testing.T) {
	b := newBinNode(t, "a.sock", "b.sock")
	first, stderr := b.start()
	b.waitDevices(2, stderr)
	held := b.addPod("p1")
	free := map[string]string{"a.sock": "b.sock", "b.sock": "a.sock"}[held]
	b.stop(first.Process)
	b.checkFiles("after the first instance's SIGTERM", []string{held}, []string{free})
	if _, err := os.Stat(filepath.Join(b.node.PluginDir(), "example.com-vhu.sock")); err == nil {
		t.Errorf("plugin socket left after SIGTERM\n%s", stderr)
	}

	second, stderr := b.start()
	b.waitDevices(2, stderr)
	b.checkFiles("after the second instance started", []string{held, free}, nil)
	if other := b.addPod("p2"); other != free {
		t.Fatalf("second pod got %s, want the free %s", other, free)
	}
	b.checkFiles("after the second pod", []string{held, free}, nil)
	b.stop(second.Process)
	b.checkFiles("after the second instance's SIGTERM", []string{held, free}, nil)

	// Pods gone, the next stop leaves nothing.
	for _, p := range []string{"p1", "p2"} {
		if err := b.node.DelPod("ns", p); err != nil {
			t.Fatal(err)
		}
	}
	third, stderr := b.start()
	b.waitDevices(2, stderr)
	b.sigterm(third, stderr)
}

// TestStopWithoutPodResourcesKeepsEverything: when the kubelet cannot be asked which
// devices pods hold, no device is known to be free, and every file and spec stays.
func TestStopWithoutPodResourcesKeepsEverything(t *testing.T) {
	b := newBinNode(t, "a.sock", "b.sock")
	cmd, stderr := b.startWith("--pod-resources-socket", filepath.Join(t.TempDir(), "none.sock"))
	b.waitDevices(2, stderr)
	b.stop(cmd.Process)
	b.checkFiles("after SIGTERM without PodResources", []string{"a.sock", "b.sock"}, nil)
}
