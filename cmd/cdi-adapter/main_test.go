package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/cdi2017/devnodes"
	"github.com/devplumb/devplumb/pkg/cdi2017/devnodes/devnodestest"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/testenv"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

const resource = "cdi.devplumb.io/tty"

// node is a kubelet emulator, device nodes tty1..ttyN of our own in a temp
// dir, a cdi-devnodes config for them, and the dirs of one adapter.
type node struct {
	t                               *testing.T
	bins, confDir, devState, cdiDir string
	adapterState                    string
	nodes                           devnodestest.Nodes
	kubelet                         *kubeletsim.Node
}

func newNode(t *testing.T, nodes, reserved int) *node {
	t.Helper()
	n := &node{t: t, bins: testenv.Build(t, "./cmd/cdi-devnodes", "./cmd/cdi-adapter"), nodes: devnodestest.New(t, nodes),
		confDir: t.TempDir(), devState: t.TempDir(), adapterState: t.TempDir()}
	// The CDI specs go where the draft's configs are, as when both are
	// /etc/cdi: neither the adapter nor the CDI library may trip on the
	// other's files.
	n.cdiDir = n.confDir
	devnodestest.WriteConfig(t, n.confDir, n.nodes.Config(reserved, n.devState, t.TempDir()))
	k, err := kubeletsim.Start(context.Background(), t.TempDir(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	n.kubelet = k
	return n
}

func (n *node) dev(i int) string { return n.nodes.Dev(i) }

// start runs the adapter binary; it is stopped when the test ends.
func (n *node) start(poll string, flags ...string) (*exec.Cmd, *bytes.Buffer) {
	n.t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(n.bins, "cdi-adapter"), "--conf-dir", n.confDir, "--bin-dir", n.bins,
		"--plugin-dir", n.kubelet.PluginDir(), "--pod-resources", n.kubelet.PodResourcesSocket(),
		"--cdi-dir", n.cdiDir, "--state-dir", n.adapterState, "--poll", poll)
	cmd.Args = append(cmd.Args, flags...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { stop(n.t, cmd) })
	return cmd, &stderr
}

// stop ends an adapter the test left running with SIGTERM and waits for it.
// A SIGKILL would end the adapter alone: a call of cdi-devnodes it has in
// flight (an INFO every poll) outlives it and goes on writing its lock and
// state files into the test's temp dir while the test's cleanup removes it
// ("directory not empty"). On SIGTERM the adapter cancels its calls and
// waits for their processes before it exits.
func stop(t *testing.T, cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return // the test stopped it and waited
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("cdi-adapter still running 30s after SIGTERM: killed")
		cmd.Process.Kill()
		<-done
	}
}

// waitDevices waits until the resource is registered with count slots.
func (n *node) waitDevices(count int, stderr *bytes.Buffer) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.kubelet.WaitResources(ctx, func(r map[string][]kubeletsim.Device) bool { return len(r[resource]) == count }); err != nil {
		n.t.Fatalf("waiting for %d slots: %v; node has %v\n%s", count, err, n.kubelet.Resources()[resource], stderr)
	}
}

// claims is what cdi-devnodes' state says: request ID -> nodes.
func (n *node) claims() map[string][]string {
	n.t.Helper()
	st, err := devnodes.ReadState(n.devState, "tty")
	if err != nil {
		n.t.Fatal(err)
	}
	out := map[string][]string{}
	for id, c := range st.Requests {
		out[id] = c.Devices
	}
	return out
}

// eventually waits for cond, failing with its last description.
func (n *node) eventually(what string, stderr *bytes.Buffer, cond func() (bool, string)) {
	n.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: never happened; last: %s\nadapter log:\n%s", what, state, stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSeen waits until the adapter has seen the request's slots in
// PodResources (its state file says so): until then a pod that is gone
// looks like one whose admission failed, which waits out the grace period.
func (n *node) waitSeen(reqID string, stderr *bytes.Buffer) {
	n.t.Helper()
	n.eventually("the adapter sees the pod in PodResources", stderr, func() (bool, string) {
		data, _ := os.ReadFile(filepath.Join(n.adapterState, "tty.json"))
		var st struct {
			Allocations map[string]struct{ Seen bool } `json:"allocations"`
		}
		json.Unmarshal(data, &st)
		return st.Allocations[reqID].Seen, string(data)
	})
}

func (n *node) addPod(name string, count int) *kubeletsim.PodAllocation {
	n.t.Helper()
	alloc, err := n.kubelet.AddPod(context.Background(), kubeletsim.PodSpec{Namespace: "default", Name: name,
		Containers: []kubeletsim.ContainerSpec{{Name: "app", Requests: []kubeletsim.ResourceRequest{{Resource: resource, Count: count}}}}})
	if err != nil {
		n.t.Fatalf("pod %s: %v", name, err)
	}
	return alloc
}

// injected resolves the CDI names with the CDI library, as a runtime does,
// and returns the host paths of the device nodes it injects.
func (n *node) injected(names []string) []string {
	n.t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(n.cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		n.t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		n.t.Fatalf("CDI spec errors: %v", errs)
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, names...); err != nil {
		n.t.Fatalf("inject %v: %v (unresolved %v)", names, err, unresolved)
	}
	var paths []string
	for _, d := range spec.Linux.Devices {
		paths = append(paths, d.Path)
		if d.Major != devnodestest.Major || d.Type != "c" {
			n.t.Errorf("injected %s as %s %d:%d", d.Path, d.Type, d.Major, d.Minor)
		}
	}
	return paths
}

// TestPodGetsDeviceNodes: a pod gets device nodes from cdi-devnodes through
// the adapter; the CDI spec passes the CDI library's checks and injects
// them; the pod's removal returns them.
func TestPodGetsDeviceNodes(t *testing.T) {
	n := newNode(t, 8, 2)
	_, stderr := n.start("100ms")
	n.waitDevices(6, stderr)

	alloc := n.addPod("web", 2)
	resp := alloc.Containers[0].Resources[0].Response
	want := []string{n.dev(3), n.dev(4)}
	var specs []string
	for _, d := range resp.GetDevices() {
		specs = append(specs, d.GetHostPath())
	}
	if !slices.Equal(specs, want) || len(resp.GetCdiDevices()) != 1 {
		t.Fatalf("AllocateResponse %v, want device specs %v and one CDI device", resp, want)
	}
	name := resp.GetCdiDevices()[0].GetName()
	if !strings.HasPrefix(name, resource+"=") {
		t.Errorf("CDI name %q", name)
	}
	if got := n.injected([]string{name}); !slices.Equal(got, want) {
		t.Errorf("CDI injects %v, want %v", got, want)
	}
	reqID := strings.TrimPrefix(name, resource+"=")
	if claims := n.claims(); len(claims) != 1 || !slices.Equal(claims[reqID], want) {
		t.Errorf("cdi-devnodes claims %v, want %s: %v", claims, reqID, want)
	}
	n.waitDevices(6, stderr) // 2 held + 4 free
	n.waitSeen(reqID, stderr)

	if err := n.kubelet.DelPod("default", "web"); err != nil {
		t.Fatal(err)
	}
	n.eventually("the pod's nodes returned", stderr, func() (bool, string) {
		claims := n.claims()
		_, err := os.Stat(filepath.Join(n.cdiDir, "cdi.devplumb.io-tty.json"))
		return len(claims) == 0 && os.IsNotExist(err), fmt.Sprintf("claims %v, spec file: %v", claims, err)
	})
	n.waitDevices(6, stderr)
}

// TestRestartFreesWhatNoPodHolds: the adapter is killed, one of two pods
// goes meanwhile; the restarted adapter DELs that pod's request and keeps
// the other's, CDI device included.
func TestRestartFreesWhatNoPodHolds(t *testing.T) {
	n := newNode(t, 6, 0)
	cmd, stderr := n.start("1h") // only the restart check may free
	n.waitDevices(6, stderr)
	gone := n.addPod("gone", 1).Containers[0].Resources[0].Response.GetCdiDevices()[0].GetName()
	kept := n.addPod("kept", 2).Containers[0].Resources[0].Response.GetCdiDevices()[0].GetName()
	cmd.Process.Kill()
	cmd.Wait()
	if err := n.kubelet.DelPod("default", "gone"); err != nil {
		t.Fatal(err)
	}
	if len(n.claims()) != 2 {
		t.Fatalf("claims before restart: %v", n.claims())
	}
	_, stderr = n.start("1h")
	keptID := strings.TrimPrefix(kept, resource+"=")
	n.eventually("the gone pod's request freed at restart", stderr, func() (bool, string) {
		claims := n.claims()
		cache, _ := cdi.NewCache(cdi.WithSpecDirs(n.cdiDir), cdi.WithAutoRefresh(false))
		return len(claims) == 1 && len(claims[keptID]) == 2 && cache.GetDevice(gone) == nil,
			fmt.Sprintf("claims %v, CDI devices %v", claims, cache.ListDevices())
	})
	if got := n.injected([]string{kept}); len(got) != 2 {
		t.Errorf("kept pod's CDI device injects %v", got)
	}
	n.waitDevices(6, stderr)
}

// TestSlotHandedOutAgain: with no poll in between, the kubelet hands the
// slots of a deleted pod to a new one; the adapter DELs the stale request
// before the new ADD, so the new pod gets every node.
func TestSlotHandedOutAgain(t *testing.T) {
	n := newNode(t, 4, 0)
	_, stderr := n.start("1h")
	n.waitDevices(4, stderr)
	n.addPod("first", 4)
	if err := n.kubelet.DelPod("default", "first"); err != nil {
		t.Fatal(err)
	}
	second := n.addPod("second", 4).Containers[0].Resources[0].Response
	if len(second.GetDevices()) != 4 {
		t.Fatalf("second pod got %v", second.GetDevices())
	}
	claims := n.claims()
	if len(claims) != 1 {
		t.Errorf("claims %v, want only the second pod's", claims)
	}
}

// TestAdmissionFailedFreedAfterGrace: the kubelet calls Allocate for the
// first container, then fails the pod's admission on the second, so no pod
// ever shows the first container's slots: its ADD is DELeted once the grace
// period is over.
func TestAdmissionFailedFreedAfterGrace(t *testing.T) {
	n := newNode(t, 3, 0)
	_, stderr := n.start("50ms", "--grace", "300ms")
	n.waitDevices(3, stderr)
	_, err := n.kubelet.AddPod(context.Background(), kubeletsim.PodSpec{Namespace: "default", Name: "half",
		Containers: []kubeletsim.ContainerSpec{
			{Name: "a", Requests: []kubeletsim.ResourceRequest{{Resource: resource, Count: 2}}},
			{Name: "b", Requests: []kubeletsim.ResourceRequest{{Resource: resource, Count: 2}}}}})
	if err == nil {
		t.Fatal("pod asking for 4 of 3 admitted")
	}
	n.eventually("the orphaned ADD freed", stderr, func() (bool, string) {
		claims := n.claims()
		return len(claims) == 0, fmt.Sprintf("%v", claims)
	})
	n.waitDevices(3, stderr)
}

// TestSIGTERM: the adapter stops cleanly and removes its socket.
func TestSIGTERM(t *testing.T) {
	n := newNode(t, 2, 0)
	cmd, stderr := n.start("1h")
	n.waitDevices(2, stderr)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr)
	}
	entries, _ := os.ReadDir(n.kubelet.PluginDir())
	for _, e := range entries {
		if e.Name() != "kubelet.sock" {
			t.Errorf("left in plugin dir: %s", e.Name())
		}
	}
}

func TestUsageErrors(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"extra"}, io.Discard, &out); code != 2 {
		t.Errorf("extra arg: code %d", code)
	}
	out.Reset()
	if code := run([]string{"--conf-dir", t.TempDir(), "--state-dir", t.TempDir()}, io.Discard, &out); code != 1 || !strings.Contains(out.String(), "no CDI configs") {
		t.Errorf("no configs: code %d, %s", code, out.String())
	}
	conf := devnodestest.New(t, 1).Config(0, t.TempDir(), t.TempDir())
	bins := testenv.Build(t, "./cmd/cdi-devnodes")
	for name, files := range map[string][]string{
		"must match its folder": {"gpu.d/devnodes.conf"},
		"both serve tty":        {"tty.d/a.conf", "tty.d/b.conf"},
		"args.glob":             {"tty.d/badglob.conf"},
	} {
		dir := t.TempDir()
		for _, f := range files {
			os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755)
			c := conf
			if strings.Contains(f, "badglob") {
				c = []byte(strings.Replace(string(conf), `"glob": "/`, `"glob": "`, 1))
			}
			os.WriteFile(filepath.Join(dir, f), c, 0o644)
		}
		out.Reset()
		if code := run([]string{"--conf-dir", dir, "--bin-dir", bins, "--state-dir", t.TempDir()}, io.Discard, &out); code != 1 || !strings.Contains(out.String(), name) {
			t.Errorf("%v: code %d, %s", files, code, out.String())
		}
	}
}

func TestHelpAndVersionExitZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"--version"}} {
		var out bytes.Buffer
		if code := run(args, &out, io.Discard); code != 0 {
			t.Errorf("%v: exit %d", args, code)
		}
	}
	var out bytes.Buffer
	run([]string{"--version"}, &out, io.Discard)
	if !strings.HasPrefix(out.String(), "cdi-adapter ") {
		t.Errorf("--version printed %q", out.String())
	}
}
