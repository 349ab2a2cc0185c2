package kubeletsim_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/kubeletsim/kubeletsimtest"
	"github.com/devplumb/devplumb/podresources"
)

const vf = "example.com/vf"

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// root is short: unix socket paths are limited to 108 bytes.
func root(t *testing.T) string {
	d, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func startNode(t *testing.T, dir string) *kubeletsim.Node {
	t.Helper()
	n, err := kubeletsim.Start(t.Context(), dir, quiet())
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(n.Stop)
	return n
}

func pod(name string, ctrs ...kubeletsim.ContainerSpec) kubeletsim.PodSpec {
	return kubeletsim.PodSpec{Namespace: "ns", Name: name, Containers: ctrs}
}

func ctr(name string, count int) kubeletsim.ContainerSpec {
	return kubeletsim.ContainerSpec{Name: name, Requests: []kubeletsim.ResourceRequest{{Resource: vf, Count: count}}}
}

func healthOf(devs []kubeletsim.Device, id string) string {
	for _, d := range devs {
		if d.ID == id {
			return d.Health
		}
	}
	return ""
}

func TestPluginRegistersStreamsAndAllocates(t *testing.T) {
	n := startNode(t, root(t))
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("d3", 1), kubeletsimtest.Dev("d1", 0), kubeletsimtest.Dev("d2", 0), kubeletsimtest.Dev("d0"))
	p.Start(t.Context(), false)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	got := n.Resources()[vf]
	if len(got) != 4 || got[0].ID != "d3" || !slices.Equal(got[0].NUMANodes, []int64{1}) || !got[0].Healthy() {
		t.Fatalf("Resources = %+v", got)
	}

	// Health change streams through.
	p.SetHealth("d3", pluginapi.Unhealthy)
	if err := n.WaitResources(t.Context(), func(r map[string][]kubeletsim.Device) bool {
		return healthOf(r[vf], "d3") == pluginapi.Unhealthy
	}); err != nil {
		t.Fatal(err)
	}

	// Only healthy devices are given, in the plugin's order, one Allocate per container.
	a, err := n.AddPod(t.Context(), pod("p1", ctr("a", 1), ctr("b", 2)))
	if err != nil {
		t.Fatalf("AddPod: %v", err)
	}
	if !slices.Equal(a.Containers[0].Devices(vf), []string{"d1"}) || !slices.Equal(a.Containers[1].Devices(vf), []string{"d2", "d0"}) {
		t.Fatalf("allocation = %+v", a)
	}
	if len(p.Allocations()) != 2 || !slices.Equal(p.Allocations()[1], []string{"d2", "d0"}) {
		t.Fatalf("plugin Allocate calls = %v", p.Allocations())
	}
	resp := a.Containers[1].Resources[0].Response
	if resp.GetEnvs()["STUB_DEVICES"] != "d2,d0" || resp.GetCdiDevices()[0].GetName() != "example.com/stub=d2" {
		t.Fatalf("AllocateResponse not kept: %v", resp)
	}
	if a.UID == "" {
		t.Error("no UID generated")
	}

	// Nothing healthy is left: the kubelet's refusal.
	_, err = n.AddPod(t.Context(), pod("p2", ctr("a", 1)))
	if err == nil || !strings.Contains(err.Error(), "requested number of devices unavailable for example.com/vf. Requested: 1, Available: 0") {
		t.Fatalf("AddPod with no free device: %v", err)
	}
	if _, err := n.AddPod(t.Context(), pod("p1", ctr("a", 1))); !errors.Is(err, kubeletsim.ErrPodExists) {
		t.Fatalf("AddPod twice: %v", err)
	}

	// PodResources answers match, containers and IDs in order.
	checkPodResources(t, n, "p1", []string{"d1", "d2", "d0"})
	alloc, err := podresourcesClient(t, n).Allocatable(t.Context())
	if err != nil || len(alloc.GetDevices()) != 3 {
		t.Fatalf("Allocatable = %v, %v (want the 3 healthy devices)", alloc, err)
	}

	// Deleting frees the devices.
	if err := n.DelPod("ns", "p1"); err != nil {
		t.Fatal(err)
	}
	if err := n.DelPod("ns", "p1"); !errors.Is(err, kubeletsim.ErrPodNotFound) {
		t.Fatalf("DelPod twice: %v", err)
	}
	if _, err := n.AddPod(t.Context(), pod("p2", ctr("a", 3))); err != nil {
		t.Fatalf("AddPod after delete: %v", err)
	}
}

func podresourcesClient(t *testing.T, n *kubeletsim.Node) *podresources.Client {
	c, err := podresources.New(n.PodResourcesSocket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func checkPodResources(t *testing.T, n *kubeletsim.Node, name string, want []string) {
	t.Helper()
	got, err := podresourcesClient(t, n).Devices(t.Context(), "ns", name, vf)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("PodResources Devices(%s) = %v, %v; want %v", name, got, err, want)
	}
}

func TestPreferredAllocationAndPreStart(t *testing.T) {
	n := startNode(t, root(t))
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("a"), kubeletsimtest.Dev("b"), kubeletsimtest.Dev("c"), kubeletsimtest.Dev("d"))
	p.Options = &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}
	// Prefers from the end, and names one device that is not available.
	p.Preferred = func(avail []string, size int) []string {
		out := []string{"nope"}
		for i := len(avail) - 1; i >= 0 && len(out) <= size; i-- {
			out = append(out, avail[i])
		}
		return out
	}
	p.Start(t.Context(), false)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	a, err := n.AddPod(t.Context(), pod("p", ctr("x", 2)))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Devices(vf); !slices.Equal(got, []string{"d", "c"}) {
		t.Fatalf("devices = %v, want the plugin's preference [d c]", got)
	}
	if len(p.PreStarts()) != 1 || !slices.Equal(p.PreStarts()[0], []string{"d", "c"}) {
		t.Fatalf("PreStartContainer calls = %v", p.PreStarts())
	}
}

func TestReRegistrationReplacesEndpoint(t *testing.T) {
	n := startNode(t, root(t))
	old := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "old.sock", kubeletsimtest.Dev("o1"))
	old.Start(t.Context(), false)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	repl := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "new.sock", kubeletsimtest.Dev("n1"), kubeletsimtest.Dev("n2"))
	repl.Start(t.Context(), false)
	if err := n.WaitResources(t.Context(), func(r map[string][]kubeletsim.Device) bool { return len(r[vf]) == 2 }); err != nil {
		t.Fatal(err)
	}
	old.SetHealth("o1", pluginapi.Unhealthy) // the old endpoint no longer counts
	a, err := n.AddPod(t.Context(), pod("p", ctr("x", 2)))
	if err != nil {
		t.Fatal(err)
	}
	if len(old.Allocations()) != 0 || len(repl.Allocations()) != 1 || !slices.Equal(a.Devices(vf), []string{"n1", "n2"}) {
		t.Fatalf("allocation went to the wrong endpoint: old %v new %v", old.Allocations(), repl.Allocations())
	}
}

func TestBrokenStreamMarksUnhealthy(t *testing.T) {
	n := startNode(t, root(t))
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("d1"), kubeletsimtest.Dev("d2"))
	p.Start(t.Context(), false)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	if err := n.WaitResources(t.Context(), func(r map[string][]kubeletsim.Device) bool {
		return healthOf(r[vf], "d1") == pluginapi.Unhealthy && healthOf(r[vf], "d2") == pluginapi.Unhealthy
	}); err != nil {
		t.Fatal(err)
	}
	if n.Registered(vf) {
		t.Error("still registered after its stream broke")
	}
	_, err := n.AddPod(t.Context(), pod("p", ctr("x", 1)))
	if !errors.Is(err, kubeletsim.ErrAdmission) || !strings.Contains(err.Error(), "cannot allocate unregistered device example.com/vf") {
		t.Fatalf("AddPod after broken stream: %v", err)
	}
}

func TestRestartKeepsAssignmentsAndPluginsReRegister(t *testing.T) {
	dir := root(t)
	n, err := kubeletsim.Start(t.Context(), dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("d1"), kubeletsimtest.Dev("d2"), kubeletsimtest.Dev("d3"))
	p.Start(t.Context(), true)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddPod(t.Context(), pod("p1", ctr("a", 2))); err != nil {
		t.Fatal(err)
	}
	n.Stop()

	// Restart: the plugin sees kubelet.sock created again and registers again.
	n2 := startNode(t, dir)
	if pods := n2.Pods(); len(pods) != 1 || !slices.Equal(pods[0].Devices(vf), []string{"d1", "d2"}) {
		t.Fatalf("pods after restart = %+v", pods)
	}
	checkPodResources(t, n2, "p1", []string{"d1", "d2"})
	if err := n2.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitRegistrations(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	a, err := n2.AddPod(t.Context(), pod("p2", ctr("a", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Devices(vf); !slices.Equal(got, []string{"d3"}) {
		t.Fatalf("after restart got %v, want the one device the checkpoint left free", got)
	}
}

func TestCorruptCheckpoint(t *testing.T) {
	dir := root(t)
	path := kubeletsim.CheckpointPath(dir)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := kubeletsim.Start(context.Background(), dir, quiet())
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Start with corrupt checkpoint: %v", err)
	}
}

func TestInvalidPods(t *testing.T) {
	n := startNode(t, root(t))
	for _, spec := range []kubeletsim.PodSpec{
		{Namespace: "", Name: "p"},
		{Namespace: "ns", Name: "P_bad"},
		pod("p", kubeletsim.ContainerSpec{Name: "c", Requests: []kubeletsim.ResourceRequest{{Resource: "vf", Count: 1}}}),
		pod("p", ctr("c", 0)),
		pod("p", ctr("c", 1), ctr("c", 1)),
	} {
		if _, err := n.AddPod(t.Context(), spec); !errors.Is(err, kubeletsim.ErrInvalidPod) {
			t.Errorf("AddPod(%+v) = %v, want ErrInvalidPod", spec, err)
		}
	}
	// A pod without device requests is admitted with no devices.
	if _, err := n.AddPod(t.Context(), pod("plain", kubeletsim.ContainerSpec{Name: "c"})); err != nil {
		t.Fatal(err)
	}
}

// A failing Allocate fails admission and leaves nothing allocated.
func TestAllocateFailureRecordsNothing(t *testing.T) {
	n := startNode(t, root(t))
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("d1"), kubeletsimtest.Dev("d2"))
	p.Start(t.Context(), false)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	p.FailAllocate(errors.New("VF reset failed"))
	_, err := n.AddPod(t.Context(), pod("p", ctr("a", 1), ctr("b", 1)))
	if !errors.Is(err, kubeletsim.ErrAdmission) || !strings.Contains(err.Error(), "VF reset failed") {
		t.Fatalf("AddPod with failing plugin: %v", err)
	}
	if len(n.Pods()) != 0 {
		t.Fatalf("failed admission recorded a pod: %+v", n.Pods())
	}
	p.FailAllocate(nil)
	if a, err := n.AddPod(t.Context(), pod("p", ctr("a", 2))); err != nil || len(a.Devices(vf)) != 2 {
		t.Fatalf("AddPod after failure: %+v, %v", a, err)
	}
}

func TestRootTooLongForSockets(t *testing.T) {
	long := filepath.Join(root(t), strings.Repeat("d", 90))
	_, err := kubeletsim.Start(t.Context(), long, quiet())
	if err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("Start with a long root: %v", err)
	}
}

// Concurrent admissions never hand out one device twice.
func TestConcurrentAddPodDistinctDevices(t *testing.T) {
	n := startNode(t, root(t))
	var devs []*pluginapi.Device
	for i := range 6 {
		devs = append(devs, kubeletsimtest.Dev(fmt.Sprintf("d%d", i)))
	}
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", devs...)
	p.Start(t.Context(), false)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = n.AddPod(context.Background(), pod(fmt.Sprintf("p%d", i), ctr("c", 1)))
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, a := range n.Pods() {
		for _, id := range a.Devices(vf) {
			if seen[id] {
				t.Fatalf("device %s given twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != 6 || len(n.Pods()) != 6 {
		t.Fatalf("%d devices to %d pods, want 6 and 6", len(seen), len(n.Pods()))
	}
}
