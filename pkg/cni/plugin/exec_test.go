package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/cni/plugin/plugintest"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// fakeDelegate stands in for a delegate plugin through libcni's invoke.Exec: the core
// of ADD, DEL, CHECK, STATUS and GC runs without root, a built plugin or a netns.
type fakeDelegate struct {
	mu    sync.Mutex
	calls []string         // "ADD net1", "DEL net2", ...
	fail  map[string]error // by CNI_COMMAND
	stdin map[string][]byte
}

func newFakeDelegate() *fakeDelegate {
	return &fakeDelegate{fail: map[string]error{}, stdin: map[string][]byte{}}
}

func (f *fakeDelegate) ExecPlugin(_ context.Context, _ string, stdin []byte, environ []string) ([]byte, error) {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	cmd := env["CNI_COMMAND"]
	f.mu.Lock()
	defer f.mu.Unlock()
	if cmd != "VERSION" {
		f.calls = append(f.calls, strings.TrimSpace(cmd+" "+env["CNI_IFNAME"]))
		f.stdin[cmd] = stdin
	}
	if err := f.fail[cmd]; err != nil {
		return nil, err
	}
	switch cmd {
	case "VERSION":
		return json.Marshal(version.All)
	case "ADD":
		var conf struct {
			CNIVersion string `json:"cniVersion"`
		}
		if err := json.Unmarshal(stdin, &conf); err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, `{"cniVersion":%q,"interfaces":[{"name":%q,"mac":"02:00:00:00:00:01","sandbox":%q}],`+
			`"ips":[{"address":"192.0.2.5/24","interface":0}]}`, conf.CNIVersion, env["CNI_IFNAME"], env["CNI_NETNS"]), nil
	}
	return nil, nil
}

func (f *fakeDelegate) FindInPath(plugin string, _ []string) (string, error) {
	return "/fake/" + plugin, nil
}

func (f *fakeDelegate) Decode(b []byte) (version.PluginInfo, error) {
	var d version.PluginDecoder
	return d.Decode(b)
}

func (f *fakeDelegate) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// execEnv is a node with one pod holding devices of example.com/vf, devplumb run
// in-process over the fake delegate.
type execEnv struct {
	t     *testing.T
	p     *Plugin
	del   *fakeDelegate
	pr    *podresourcestest.Server
	root  string
	conf  map[string]any
	store *devinfo.Store
}

func newExecEnv(t *testing.T, devices ...string) *execEnv {
	pr := podresourcestest.NewServer(t)
	pr.SetPod(&v1.PodResources{Namespace: "default", Name: "p1", Containers: []*v1.ContainerResources{{
		Name: "app", Devices: []*v1.ContainerDevices{{ResourceName: "example.com/vf", DeviceIds: devices}},
	}}})
	root := t.TempDir()
	store := devinfo.NewStore(filepath.Join(root, "devinfo"))
	for _, d := range devices {
		info := &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version, Pci: &devinfo.PciDevice{PciAddress: d}}
		if err := store.WriteDP("example.com/vf", d, info); err != nil {
			t.Fatal(err)
		}
	}
	del := newFakeDelegate()
	return &execEnv{t: t, del: del, pr: pr, root: root, store: store,
		p: &Plugin{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Timeout: 5 * time.Second, Exec: del},
		conf: map[string]any{"cniVersion": "1.0.0", "name": "fast-net", "type": "devplumb", "resourceName": "example.com/vf",
			"podResourcesSocket": pr.Socket, "deviceInfoDir": store.Dir, "stateDir": filepath.Join(root, "state"),
			"delegate": map[string]any{"type": "sriov"}}}
}

func (e *execEnv) args(ifName string) *skel.CmdArgs {
	return podCall(e.t, e.conf, "/var/run/netns/p1", ifName, "/fake")
}

func (e *execEnv) state() []*attachment.Record { return stateRecords(e.t, e.root) }

// podCall is a CNI call of pod default/p1 (container c1) with conf as stdin.
func podCall(t *testing.T, conf map[string]any, netns, ifName, cniPath string) *skel.CmdArgs {
	t.Helper()
	data := nodeconfigtest.SplitEnv(t, conf)
	return &skel.CmdArgs{ContainerID: "c1", Netns: netns, IfName: ifName, Path: cniPath,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=u1", StdinData: data}
}

// stateRecords are the attachment records under root/state.
func stateRecords(t *testing.T, root string) []*attachment.Record {
	t.Helper()
	return plugintest.Records(t, filepath.Join(root, "state"))
}

// captureStdout is what f printed (the CNI result ADD prints).
func captureStdout(t *testing.T, f func() error) (string, error) {
	t.Helper()
	return testenv.Stdout(t, f)
}

func wantCode(t *testing.T, what string, err error, code uint) *types.Error {
	t.Helper()
	var te *types.Error
	if !errors.As(err, &te) || te.Code != code {
		t.Fatalf("%s: %v, want CNI error code %d", what, err, code)
	}
	return te
}

// A repeated ADD of a completed attachment replays its result: the delegate runs once,
// and the device is not taken twice.
func TestRepeatedAddReplays(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	first, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) })
	if err != nil {
		t.Fatal(err)
	}
	again, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) })
	if err != nil {
		t.Fatal(err)
	}
	if first != again || !strings.Contains(first, "192.0.2.5/24") {
		t.Errorf("replayed result %q, first %q", again, first)
	}
	if calls := e.del.called(); !slices.Equal(calls, []string{"ADD net1"}) {
		t.Errorf("delegate calls %v, want one ADD", calls)
	}
	if st := e.state(); len(st) != 1 || st[0].DeviceID != "0000:01:00.1" || !st[0].Complete {
		t.Errorf("state %+v", st)
	}
}

// A delegate ADD that fails is undone: its DEL runs, the CNI device-info file and the
// record go, and the delegate's own error code and message reach the caller.
func TestFailedDelegateAddRollsBack(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	e.del.fail["ADD"] = types.NewError(11, "VF 0000:01:00.1 is busy", "")
	err := e.p.Add(e.args("net1"))
	te := wantCode(t, "ADD", err, 11)
	if !strings.Contains(te.Msg, "VF 0000:01:00.1 is busy") {
		t.Errorf("message %q lacks the delegate's", te.Msg)
	}
	if calls := e.del.called(); !slices.Equal(calls, []string{"ADD net1", "DEL net1"}) {
		t.Errorf("delegate calls %v, want ADD then its rollback DEL", calls)
	}
	if st := e.state(); len(st) != 0 {
		t.Errorf("records after a failed ADD: %+v", st)
	}
	files, err := e.store.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Kind == devinfo.KindCNI {
			t.Errorf("CNI device-info file left: %s", f.Path)
		}
	}
	// The device is free again: the next ADD gets it.
	delete(e.del.fail, "ADD")
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) }); err != nil {
		t.Fatalf("ADD after the rollback: %v", err)
	}
}

// The pod's one device goes to the first attachment; a second attachment finds none
// free and says who holds it.
func TestSecondAttachmentFindsNoFreeDevice(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) }); err != nil {
		t.Fatal(err)
	}
	te := wantCode(t, "second ADD", e.p.Add(e.args("net2")), ErrNoFreeDevice)
	if !strings.Contains(te.Msg+te.Details, "0000:01:00.1") {
		t.Errorf("error %q / %q does not name the held device", te.Msg, te.Details)
	}
	if st := e.state(); len(st) != 1 || st[0].IfName != "net1" {
		t.Errorf("state %+v", st)
	}
}

// An ADD that died after its delegate ran (no completion recorded) is undone by the
// next ADD of the attachment before it runs the delegate again.
func TestAddAfterCrashUndoesTheEarlierDelegate(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) }); err != nil {
		t.Fatal(err)
	}
	cs := attachment.New(filepath.Join(e.root, "state"))
	rec := e.state()[0]
	rec.Complete, rec.Result = false, nil // as a devplumb killed after the delegate ADD leaves it
	if err := cs.Put(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) }); err != nil {
		t.Fatal(err)
	}
	if calls := e.del.called(); !slices.Equal(calls, []string{"ADD net1", "DEL net1", "ADD net1"}) {
		t.Errorf("delegate calls %v, want the earlier ADD undone before the new one", calls)
	}
	if st := e.state(); len(st) != 1 || !st[0].Complete {
		t.Errorf("state %+v", st)
	}
}

// CHECK passes on a completed attachment and runs the delegate's CHECK; it fails, naming
// what, on an attachment never added and on a lost CNI device-info file.
func TestCheck(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	wantCode(t, "CHECK before ADD", e.p.Check(e.args("net1")), ErrState)
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) }); err != nil {
		t.Fatal(err)
	}
	e.conf["prevResult"] = json.RawMessage(`{"cniVersion":"1.0.0","interfaces":[{"name":"net1"}]}`)
	if err := e.p.Check(e.args("net1")); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	if calls := e.del.called(); !slices.Contains(calls, "CHECK net1") {
		t.Errorf("delegate calls %v lack CHECK", calls)
	}
	e.del.fail["CHECK"] = types.NewError(types.ErrTryAgainLater, "VF link down", "")
	if te := wantCode(t, "CHECK of a failing delegate", e.p.Check(e.args("net1")), types.ErrTryAgainLater); !strings.Contains(te.Msg, "VF link down") {
		t.Errorf("message %q lacks the delegate's", te.Msg)
	}
	delete(e.del.fail, "CHECK")
	if err := os.Remove(e.state()[0].CNIFile); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "CHECK without the CNI file", e.p.Check(e.args("net1")), ErrDeviceInfo)
}

// STATUS asks the kubelet first, then the delegates.
func TestStatus(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	e.conf["cniVersion"] = "1.1.0"
	if err := e.p.Status(e.args("")); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	if calls := e.del.called(); !slices.Equal(calls, []string{"STATUS"}) {
		t.Errorf("delegate calls %v, want STATUS", calls)
	}
	e.del.fail["STATUS"] = types.NewError(types.ErrPluginNotAvailable, "no VFs configured", "")
	te := wantCode(t, "STATUS of an unready delegate", e.p.Status(e.args("")), types.ErrPluginNotAvailable)
	if !strings.Contains(te.Msg, "no VFs configured") {
		t.Errorf("message %q lacks the delegate's", te.Msg)
	}
	e.conf["podResourcesSocket"] = filepath.Join(e.root, "no-kubelet.sock")
	te = wantCode(t, "STATUS without a kubelet", e.p.Status(e.args("")), types.ErrPluginNotAvailable)
	if !strings.Contains(te.Msg, "PodResources") {
		t.Errorf("message %q does not say the kubelet's API is missing", te.Msg)
	}
}

// GC removes the attachments of the network that the runtime no longer lists: their
// delegate DEL runs and their record is released; the listed ones stay.
func TestGCRemovesWhatTheRuntimeNoLongerHas(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1", "0000:01:00.2")
	for _, ifName := range []string{"net1", "net2"} {
		if _, err := captureStdout(t, func() error { return e.p.Add(e.args(ifName)) }); err != nil {
			t.Fatal(err)
		}
	}
	e.conf["cniVersion"] = "1.1.0"
	e.conf["cni.dev/valid-attachments"] = []map[string]string{{"containerID": "c1", "ifname": "net1"}}
	if err := e.p.GC(e.args("")); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if st := e.state(); len(st) != 1 || st[0].IfName != "net1" {
		t.Errorf("state after GC %+v, want net1 alone", st)
	}
	if calls := e.del.called(); !slices.Contains(calls, "DEL net2") || slices.Contains(calls, "DEL net1") {
		t.Errorf("delegate calls %v, want net2's DEL only", calls)
	}
}

// argsFor is args for another network of the same pod: name, and the config
// changed by edit.
func (e *execEnv) argsFor(name, ifName string, edit func(map[string]any)) *skel.CmdArgs {
	conf := maps.Clone(e.conf)
	conf["name"] = name
	edit(conf)
	a := e.args(ifName)
	a.StdinData = nodeconfigtest.SplitEnv(e.t, conf)
	return a
}

// A pod attached to a network whose device the caller injects (Multus's
// runtimeConfig.deviceID, here a top-level deviceID) and to one that names the
// resource never gets one device twice, whichever ADD runs first: run at once,
// the two attachments hold the pod's two devices.
func TestInjectedAndResourceNamedAttachmentsTakeTwoDevices(t *testing.T) {
	for range 5 {
		e := newExecEnv(t, "0000:01:00.1", "0000:01:00.2")
		injected := e.argsFor("injected-net", "net1", func(c map[string]any) {
			delete(c, "resourceName")
			c["deviceID"] = "0000:01:00.1"
		})
		named := e.argsFor("named-net", "net2", func(map[string]any) {})
		errs := e.addAtOnce(injected, named)
		held := e.heldOnce()
		// The injected network may find its device taken (a clear error naming
		// the holder); the resourceName network always gets a device.
		if errs[1] != nil || (errs[0] == nil) != (len(held) == 2) {
			t.Fatalf("ADDs: injected %v, named %v; held %v", errs[0], errs[1], held)
		}
		if errs[0] != nil {
			te := wantCode(t, "injected ADD", errs[0], ErrNoFreeDevice)
			if !strings.Contains(te.Msg+te.Details, "interface net2") {
				t.Errorf("error %q / %q does not name the holder", te.Msg, te.Details)
			}
		}
	}
}

// A record of an injected device whose pod the kubelet no longer lists (its DEL
// never came) is left over by the same rule as any other: a pod the kubelet
// now gives that device takes it over through resourceName.
func TestInjectedRecordOfAGonePodIsTakenOver(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	old := attachment.New(filepath.Join(e.root, "state"))
	k := attachment.Key{Network: "injected-net", ContainerID: "c0", IfName: "net1"}
	if err := old.Put(&attachment.Record{Key: k, Pod: attachment.Pod{Namespace: "default", Name: "gone"}, DeviceID: "0000:01:00.1", Complete: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) }); err != nil {
		t.Fatalf("ADD of the pod the kubelet gives the device: %v", err)
	}
	st := e.state()
	if len(st) != 1 || st[0].Pod.Name != "p1" || st[0].DeviceID != "0000:01:00.1" {
		t.Fatalf("records %+v, want only p1's of 0000:01:00.1", st)
	}
}

// ADD records the CNI path it found the delegates in, for devplumbctl gc to run
// their DEL from there.
func TestAddRecordsItsCNIPath(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) }); err != nil {
		t.Fatal(err)
	}
	if st := e.state(); len(st) != 1 || st[0].CNIPath != "/fake" {
		t.Fatalf("records %+v: want one with the ADD's CNI path /fake", st)
	}
}
