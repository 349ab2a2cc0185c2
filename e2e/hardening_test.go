package e2e

import (
	"encoding/json"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// A caller-given CNIDeviceInfoFile outside the device-info directories is
// refused by ADD (devplumb would overwrite it) and ignored by DEL, which
// succeeds without removing it.
func TestCNIDeviceInfoFileOutsideIsRefused(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.writeDP("0000:05:00.1", pciInfo("0000:05:00.1"))
	victim := filepath.Join(e.root, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := e.conf("fast-net", e.recorder(nil))
	conf["runtimeConfig"] = map[string]string{"deviceID": "0000:05:00.1", "CNIDeviceInfoFile": victim}
	for _, cmd := range []string{"ADD", "DEL"} {
		_, ce := e.run(cmd, mustJSON(t, conf), "c1", pod.Path(), "net1", podArgs("default", "p1"))
		refused := ce != nil && ce.Code == types.ErrInvalidNetworkConfig && contains(ce.Msg, "must be a file directly in "+e.devinfoDir+"/cni")
		if refused != (cmd == "ADD") {
			t.Errorf("%s with CNIDeviceInfoFile %s: %+v", cmd, victim, ce)
		}
		if data, err := os.ReadFile(victim); err != nil || string(data) != "keep me" {
			t.Fatalf("%s touched %s: %q %v", cmd, victim, data, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.recordDir, "ADD-c1_net1.json")); err == nil {
		t.Error("the delegate ADD ran")
	}
}

// A delegate pinned to cniVersion 0.3.1 has no CHECK: devplumb's CHECK checks
// its own part and passes instead of failing on the delegate's version.
func TestCheckWithPre040Delegate(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "dev-1")
	e.install(e.conf("fast-net", e.recorder(map[string]any{"cniVersion": "0.3.1"})))
	args := podArgs("default", "p1")
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", args, "")
	e.mustCnitool("check", "fast-net", pod.Path(), "net1", args, "")
	if _, err := os.Stat(filepath.Join(e.recordDir, "CHECK-"+testenv.CnitoolID(pod.Path())+"_net1.json")); !os.IsNotExist(err) {
		t.Errorf("a 0.3.1 delegate got CHECK: %v", err)
	}
}

// A corrupt state record of one attachment neither blocks other pods' ADDs
// nor its own DEL.
func TestCorruptStateRecord(t *testing.T) {
	e := newEnv(t)
	a, b := testenv.NetNS(t), testenv.NetNS(t)
	e.setPod("default", "a", "dev-a")
	e.setPod("default", "b", "dev-b")
	e.install(e.conf("fast-net", e.recorder(nil)))
	e.mustCnitool("add", "fast-net", a.Path(), "net1", podArgs("default", "a"), "")
	rec := e.corruptRecord("fast-net", testenv.CnitoolID(a.Path()), "net1")
	e.mustCnitool("add", "fast-net", b.Path(), "net1", podArgs("default", "b"), "")
	e.mustCnitool("del", "fast-net", a.Path(), "net1", podArgs("default", "a"), "")
	if _, err := os.Stat(rec); !os.IsNotExist(err) {
		t.Errorf("corrupt record kept after its DEL: %v", err)
	}
	if st := e.state(); len(st) != 1 || st[0].Pod.Name != "b" {
		t.Errorf("state %+v", st)
	}
}

// ADD repeated without DEL for a completed attachment returns its result and
// leaves the attachment working: running host-device again would fail (the
// device is in the pod already) and its rollback would pull the device out.
func TestRepeatedAddKeepsWorkingAttachment(t *testing.T) {
	e := newEnv(t)
	dev, pod, _, args := e.hostDevicePod("0000:01:02.6")
	first := e.mustCnitool("add", "fast-net", pod.Path(), "net1", args, "")
	again := e.mustCnitool("add", "fast-net", pod.Path(), "net1", args, "")
	if first != again {
		t.Errorf("repeated ADD result %s, first %s", again, first)
	}
	if !linkIn(t, pod, "net1") || hostLink(dev) {
		t.Fatal("the device left the pod on the repeated ADD")
	}
	if st := e.state(); len(st) != 1 || !st[0].Complete || st[0].DeviceID != dev {
		t.Fatalf("state %+v", st)
	}
	e.mustCnitool("del", "fast-net", pod.Path(), "net1", args, "")
	if linkIn(t, pod, "net1") || !hostLink(dev) {
		t.Error("DEL did not move the device back")
	}
}

// devplumb after another plugin in the runtime's chain: its output keeps the
// prevResult's interface and IP and adds the delegate's, in the config's
// version (0.3.1 here, with interface indexes).
func TestPrevResultKeptInChain(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "dev-1")
	conf := e.conf("fast-net", e.recorder(map[string]any{"ip": "192.0.2.7/24"}))
	conf["cniVersion"] = "0.3.1"
	conf["prevResult"] = map[string]any{"cniVersion": "0.3.1",
		"interfaces": []any{map[string]any{"name": "eth0", "sandbox": pod.Path()}},
		"ips":        []any{map[string]any{"version": "4", "address": "10.1.0.2/24", "interface": 0}}}
	out, ce := e.run("ADD", mustJSON(t, conf), "c1", pod.Path(), "net1", podArgs("default", "p1"))
	if ce != nil {
		t.Fatalf("ADD: %+v", ce)
	}
	var res struct {
		CNIVersion string
		Interfaces []struct{ Name string }
		IPs        []struct {
			Address   string
			Interface int
		}
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if res.CNIVersion != "0.3.1" || len(res.Interfaces) != 2 || res.Interfaces[0].Name != "eth0" || res.Interfaces[1].Name != "net1" ||
		len(res.IPs) != 2 || res.IPs[0].Address != "10.1.0.2/24" || res.IPs[1].Interface != 1 {
		t.Errorf("result %s", out)
	}
	if st := e.state(); len(st) != 1 || st[0].NetworkStatus == nil || len(st[0].NetworkStatus.IPs) != 1 {
		t.Errorf("network-status must describe the delegate's interface only: %+v", st)
	}
}

// Per CNI version: the delegate inherits it, CHECK exists from 0.4.0, STATUS
// and GC from 1.1.0 (an older config gets code 2 for them), ADD and DEL
// always.
func TestCommandsPerVersion(t *testing.T) {
	e := newEnv(t)
	e.pr.SetAllocatable(&v1.AllocatableResourcesResponse{})
	e.setPod("default", "p1", "dev-1")
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			pod := testenv.NetNS(t)
			conf := e.conf("fast-net", e.recorder(nil))
			conf["cniVersion"] = v
			stdin, args := mustJSON(t, conf), podArgs("default", "p1")
			if _, ce := e.run("ADD", stdin, "c1", pod.Path(), "net1", args); ce != nil {
				t.Fatalf("ADD: %+v", ce)
			}
			if _, got := e.record("ADD", "c1", "net1"); got["cniVersion"] != v {
				t.Errorf("delegate got cniVersion %v", got["cniVersion"])
			}
			// In this order: GC (with no valid attachments) removes the attachment.
			for _, c := range []struct{ cmd, since string }{{"CHECK", "0.4.0"}, {"STATUS", "1.1.0"}, {"GC", "1.1.0"}} {
				_, ce := e.run(c.cmd, stdin, "c1", pod.Path(), "net1", args)
				if supported := v >= c.since; supported != (ce == nil) || (ce != nil && ce.Code != types.ErrIncompatibleCNIVersion) {
					t.Errorf("%s at %s: %+v", c.cmd, v, ce)
				}
			}
			if _, ce := e.run("DEL", stdin, "c1", pod.Path(), "net1", args); ce != nil {
				t.Errorf("DEL: %+v", ce)
			}
		})
	}
}

// ADD retried after devplumb died while the delegate ran (state records the
// delegate config, not completion) first undoes that delegate ADD, so
// host-device finds its device on the host again and the retry succeeds.
func TestAddRetriedAfterCrashInDelegate(t *testing.T) {
	e := newEnv(t)
	dev, pod, _, args := e.hostDevicePod("0000:01:02.7")
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", args, "")
	store := attachment.New(e.stateDir)
	rec, err := store.Get(attachment.Key{Network: "fast-net", ContainerID: testenv.CnitoolID(pod.Path()), IfName: "net1"})
	if err != nil || rec == nil {
		t.Fatalf("state %+v %v", rec, err)
	}
	rec.Complete, rec.Result, rec.NetworkStatus = false, nil, nil
	if err := store.Put(rec); err != nil {
		t.Fatal(err)
	}
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", args, "")
	if !linkIn(t, pod, "net1") || hostLink(dev) {
		t.Fatal("the device is not in the pod after the retried ADD")
	}
	if st := e.state(); len(st) != 1 || !st[0].Complete {
		t.Errorf("state %+v", st)
	}
}

// ADD repeated for a completed attachment with other inputs (here another
// CNI_ARGS) undoes the first setup and makes the new one, instead of failing
// on top of it and rolling the working device out of the pod.
func TestRepeatedAddWithOtherInputs(t *testing.T) {
	e := newEnv(t)
	dev, pod, _, args := e.hostDevicePod("0000:01:03.0")
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", args, "")
	e.mustCnitool("add", "fast-net", pod.Path(), "net1", args+";K8S_POD_INFRA_CONTAINER_ID=other", "")
	if !linkIn(t, pod, "net1") || hostLink(dev) {
		t.Fatal("the device is not in the pod after the repeated ADD")
	}
	if st := e.state(); len(st) != 1 || !st[0].Complete {
		t.Errorf("state %+v", st)
	}
}

// State records that are a FIFO or links (to /dev/zero, or to a record
// elsewhere) neither block nor mislead ADD, which reads every record under
// the node-wide lock: ADD of another pod succeeds, and each hostile record's
// own DEL succeeds and removes it (the link, never its target).
func TestHostileStateRecords(t *testing.T) {
	e := newEnv(t)
	e.setPod("default", "b", "dev-b")
	e.install(e.conf("fast-net", e.recorder(nil)))
	att := filepath.Join(e.stateDir, "attachments")
	if err := os.MkdirAll(att, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(e.root, "elsewhere.json")
	if err := os.WriteFile(target, []byte(`{"network":"fast-net","containerID":"c-link","ifName":"net1","deviceID":"dev-b"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	hostile := map[string]func(string) error{
		"c-fifo": func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"c-zero": func(p string) error { return os.Symlink("/dev/zero", p) },
		"c-link": func(p string) error { return os.Symlink(target, p) },
	}
	for cid, mk := range hostile {
		if err := mk(filepath.Join(att, "fast-net:"+cid+":net1.json")); err != nil {
			t.Fatal(err)
		}
	}
	b := testenv.NetNS(t)
	if _, ce := e.run("ADD", mustJSON(t, e.conf("fast-net", e.recorder(nil))), "c-b", b.Path(), "net1", podArgs("default", "b")); ce != nil {
		t.Fatalf("ADD beside hostile records: %+v", ce)
	}
	for cid := range hostile {
		if _, ce := e.run("DEL", mustJSON(t, e.conf("fast-net", e.recorder(nil))), cid, "", "net1", podArgs("default", "x")); ce != nil {
			t.Errorf("DEL of %s: %+v", cid, ce)
		}
	}
	if ents, _ := os.ReadDir(att); len(ents) != 1 || ents[0].Name() != "fast-net:c-b:net1.json" {
		t.Errorf("state left: %v", ents)
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("DEL removed the link's target: %v", err)
	}
}

// A link at <deviceInfoDir>/cni, stateDir/lock, stateDir/attachments or
// stateDir/libcni, or a stateDir others can write, makes ADD fail with a
// state or I/O error: devplumb writes nothing in the link's target and runs
// no delegate. The directories are the node config's (e.run moves them
// there).
func TestLinkedDirectoriesAreRefused(t *testing.T) {
	cases := map[string]func(e *env, target string) error{
		"devinfo cni": func(e *env, target string) error { return os.Symlink(target, filepath.Join(e.devinfoDir, "cni")) },
		"state lock": func(e *env, target string) error {
			return os.Symlink(filepath.Join(target, "lock"), filepath.Join(e.stateDir, "lock"))
		},
		"state attachments": func(e *env, target string) error {
			return os.Symlink(target, filepath.Join(e.stateDir, "attachments"))
		},
		"state libcni":            func(e *env, target string) error { return os.Symlink(target, filepath.Join(e.stateDir, "libcni")) },
		"stateDir world-writable": func(e *env, _ string) error { return os.Chmod(e.stateDir, 0o777) },
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			pod := testenv.NetNS(t)
			e.pciPod("p1", "0000:05:00.1")
			target := t.TempDir()
			if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := setup(e, target); err != nil {
				t.Fatal(err)
			}
			_, ce := e.run("ADD", mustJSON(t, e.conf("fast-net", e.recorder(nil))), "c1", pod.Path(), "net1", podArgs("default", "p1"))
			if ce == nil || (!contains(ce.Msg+ce.Details, "unsafe directory") && !contains(ce.Details, "symbolic link")) {
				t.Errorf("ADD: %+v", ce)
			}
			if ents, _ := os.ReadDir(target); len(ents) != 0 {
				t.Errorf("written in the link's target: %v", ents)
			}
			if _, err := os.Stat(e.recordDir); err == nil {
				t.Error("the delegate ran")
			}
		})
	}
}

// Names that cannot be files are refused at ADD with error 7 naming the
// input, and DEL of the same attachment succeeds and leaves nothing; names
// long but valid work, their state record under a hashed name.
func TestNamesPastFileLimits(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.pciPod("p1", "0000:05:00.1")
	cniDir := filepath.Join(e.devinfoDir, "cni")
	withFile := func(f string) map[string]any {
		c := e.conf("fast-net", e.recorder(nil))
		c["runtimeConfig"] = map[string]string{"CNIDeviceInfoFile": f}
		return c
	}
	refused := []struct {
		name, cid, want string
		conf            map[string]any
	}{
		{"300-byte container ID", strings.Repeat("c", 300), "container ID (300 bytes)", e.conf("fast-net", e.recorder(nil))},
		{"NUL in CNIDeviceInfoFile", "c1", "runtimeConfig.CNIDeviceInfoFile", withFile(cniDir + "/a\x00b")},
		{"300-byte CNIDeviceInfoFile", "c1", "runtimeConfig.CNIDeviceInfoFile", withFile(cniDir + "/" + strings.Repeat("f", 300))},
	}
	for _, tc := range refused {
		stdin := mustJSON(t, tc.conf)
		_, ce := e.run("ADD", stdin, tc.cid, pod.Path(), "net1", podArgs("default", "p1"))
		if ce == nil || ce.Code != types.ErrInvalidNetworkConfig || !contains(ce.Msg, tc.want) {
			t.Errorf("%s: ADD %+v", tc.name, ce)
		}
		if _, ce := e.run("DEL", stdin, tc.cid, pod.Path(), "net1", podArgs("default", "p1")); ce != nil {
			t.Errorf("%s: DEL %+v", tc.name, ce)
		}
		e.assertNoAttachments(t, tc.name)
	}
	// 230 + 16 + 4 bytes fit libcni's and the CNI file's names, not the record's plain name.
	long := e.conf(strings.Repeat("n", 230), e.recorder(nil))
	cid := strings.Repeat("c", 16)
	if _, ce := e.run("ADD", mustJSON(t, long), cid, pod.Path(), "net1", podArgs("default", "p1")); ce != nil {
		t.Fatalf("ADD with a 230-byte network name: %+v", ce)
	}
	if st := e.state(); len(st) != 1 || st[0].Network != long["name"] || st[0].CNIFile == "" {
		t.Errorf("state %+v", st)
	}
	if _, ce := e.run("DEL", mustJSON(t, long), cid, pod.Path(), "net1", podArgs("default", "p1")); ce != nil {
		t.Errorf("DEL with a 230-byte network name: %+v", ce)
	}
	e.assertNoAttachments(t, "230-byte network name")
}

// assertNoAttachments fails when state records or CNI device-info files exist.
func (e *env) assertNoAttachments(t *testing.T, what string) {
	t.Helper()
	for _, d := range []string{filepath.Join(e.stateDir, "attachments"), filepath.Join(e.devinfoDir, "cni")} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s: left in %s: %v", what, d, ents)
		}
	}
}

// devplumb never runs itself: a delegate that is devplumb under another name
// (a link in the CNI bin dir), a copy of it, or devplumb as a delegate's IPAM
// plugin makes ADD fail, DEL of the attachment succeeds, and nothing is
// left; every run ends (a recursion would fill the process table).
func TestSelfDelegation(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.extraPath = t.TempDir()
	if err := os.Symlink(filepath.Join(e.bin, "devplumb"), filepath.Join(e.extraPath, "selfie")); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(e.bin, "devplumb"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.extraPath, "selfcopy"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	inner := func(typ string) map[string]any {
		c := e.conf("inner", e.recorder(nil))
		c["type"] = typ
		delete(c, "cniVersion")
		delete(c, "name")
		return c
	}
	cases := map[string]map[string]any{
		"link":      inner("selfie"),
		"copy":      inner("selfcopy"),
		"link IPAM": {"type": "host-device", "ipam": map[string]any{"type": "selfie"}},
		"copy IPAM": {"type": "host-device", "ipam": map[string]any{"type": "selfcopy"}},
	}
	dev := testenv.VethPair(t, "dpv") + "a" // host-device runs its IPAM plugin only with a real device
	for name, delegate := range cases {
		conf := e.conf("fast-net", delegate)
		conf["deviceID"], conf["injectDeviceID"] = dev, []string{"device"}
		conf["trustDeviceID"] = true // no kubelet pod: the delegate check is what runs
		stdin := mustJSON(t, conf)
		if _, ce := e.run("ADD", stdin, "c1", pod.Path(), "net1", podArgs("default", "p1")); ce == nil || !contains(ce.Msg, "itself") {
			t.Errorf("%s: ADD %+v", name, ce)
		}
		if _, ce := e.run("DEL", stdin, "c1", pod.Path(), "net1", podArgs("default", "p1")); ce != nil {
			t.Errorf("%s: DEL %+v", name, ce)
		}
		e.assertNoAttachments(t, name)
		if !hostLink(dev) {
			t.Fatalf("%s: the device did not come back to the host", name)
		}
	}
}

// A delegate of devplumb's own type name: ADD refuses the config, and its DEL (the runtime
// retries DEL until it succeeds, keeping the pod terminating) succeeds doing nothing.
func TestDelOfSelfDelegatingConfig(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	conf := e.conf("fast-net", map[string]any{"type": "devplumb"})
	conf["deviceID"], conf["trustDeviceID"] = "dpz0", true
	stdin := mustJSON(t, conf)
	if _, ce := e.run("ADD", stdin, "c1", pod.Path(), "net1", podArgs("default", "p1")); ce == nil || !contains(ce.Msg, "is devplumb itself") {
		t.Errorf("ADD: %+v, want the config refused for delegating to devplumb", ce)
	}
	for i := range 2 {
		if _, ce := e.run("DEL", stdin, "c1", pod.Path(), "net1", podArgs("default", "p1")); ce != nil {
			t.Errorf("DEL %d: %+v", i+1, ce)
		}
	}
	e.assertNoAttachments(t, "self-delegating config")
}

// The kubelet is never asked while the node-wide state lock is held (a slow
// kubelet would make every ADD on the node wait): here, with a stale claim
// to take over, every PodResources call finds the lock free.
func TestKubeletNotAskedUnderStateLock(t *testing.T) {
	var mu sync.Mutex
	var calls, underLock int
	e := newEnv(t)
	e.pr = podresourcestest.NewServer(t, podresourcestest.WithOnCall(func(string) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if lockHeld(filepath.Join(e.stateDir, "lock")) {
			underLock++
		}
	}))
	oldPod, newPod := testenv.NetNS(t), testenv.NetNS(t)
	e.takeOver(oldPod, newPod)
	if st := e.state(); len(st) != 1 || st[0].Pod.Name != "new" {
		t.Fatalf("stale claim not taken over: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls < 3 || underLock != 0 {
		t.Errorf("%d of %d PodResources calls came while the state lock was held", underLock, calls)
	}
}

// lockHeld reports whether someone holds the flock on path.
func lockHeld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// A new sandbox takes over only its own pod's claims, and only once the old
// sandbox is gone: not while it is still there, and not those of a pod of
// the same name with another UID whose sandbox is still there.
func TestSandboxTakeoverNeedsSamePodAndGoneSandbox(t *testing.T) {
	e := newEnv(t)
	e.pciPod("p1", "0000:01:02.3")
	e.install(e.conf("fast-net", e.recorder(nil)))
	old, cur := testenv.NetNS(t), testenv.NetNS(t)
	e.mustCnitool("add", "fast-net", old.Path(), "net1", podArgs("default", "p1"), "")
	recreated := strings.Replace(podArgs("default", "p1"), "uid-p1", "uid-p1-again", 1)
	for _, args := range []string{podArgs("default", "p1"), recreated} {
		_, errOut, err := e.cnitool("add", "fast-net", cur.Path(), "net1", args, "")
		if err == nil || !contains(errOut, "held by pod default/p1") {
			t.Errorf("ADD of a new sandbox while the old one is there (%s): %v %s", args, err, errOut)
		}
	}
	if st := e.state(); len(st) != 1 || st[0].ContainerID != testenv.CnitoolID(old.Path()) {
		t.Fatalf("the old sandbox lost its claim: %+v", st)
	}
	testenv.RemoveNetNS(t, old)
	e.mustCnitool("add", "fast-net", cur.Path(), "net1", recreated, "")
	if st := e.state(); len(st) != 1 || st[0].ContainerID != testenv.CnitoolID(cur.Path()) || st[0].Pod.UID != "uid-p1-again" {
		t.Errorf("the recreated pod did not take the gone sandbox's device: %+v", st)
	}
}

// A device plugin file whose PCI address is not the device it is filed
// under (a rogue or broken device plugin steering the delegate to another
// device) fails ADD with 102 naming both, and leaves nothing.
func TestDeviceInfoForAnotherDevice(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "0000:05:00.1")
	e.writeDP("0000:05:00.1", pciInfo("0000:05:00.2"))
	_, ce := e.run("ADD", mustJSON(t, e.conf("fast-net", e.recorder(nil))), "c1", pod.Path(), "net1", podArgs("default", "p1"))
	if ce == nil || ce.Code != 102 || !contains(ce.Details, "filed under device 0000:05:00.1 describes PCI device 0000:05:00.2") {
		t.Fatalf("ADD: %+v", ce)
	}
	e.assertNoAttachments(t, "mismatched device-info")
	if _, err := os.Stat(filepath.Join(e.recordDir, "ADD-c1_net1.json")); err == nil {
		t.Error("the delegate ADD ran")
	}
}

// A podResourcesSocket or kubeconfig that someone other than root could
// have made (in a directory others can write, or a file others can write)
// is refused: the kubelet's answer decides who gets a device, and a
// kubeconfig names the API server devplumb trusts. The node config names
// them (e.run moves them there): a network config may not
// (TestNADCannotNameNodeSettings).
func TestUntrustedSocketAndKubeconfig(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "dev-1")
	open := filepath.Join(e.root, "open")
	if err := os.Mkdir(open, 0o777); err != nil || os.Chmod(open, 0o777) != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(open, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conf := e.conf("fast-net", e.recorder(nil))
	conf["podResourcesSocket"] = filepath.Join(open, "kubelet.sock")
	_, ce := e.run("ADD", mustJSON(t, conf), "c1", pod.Path(), "net1", podArgs("default", "p1"))
	if ce == nil || ce.Code != 104 || !contains(ce.Msg, "podResourcesSocket") || !contains(ce.Details, "writable by group or others") {
		t.Errorf("ADD with a socket in a world-writable dir: %+v", ce)
	}
	kubeconfig := filepath.Join(e.root, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o666); err != nil || os.Chmod(kubeconfig, 0o666) != nil {
		t.Fatal(err)
	}
	conf = e.conf("fast-net", e.recorder(nil))
	conf["kubeconfig"] = kubeconfig
	_, ce = e.run("ADD", mustJSON(t, conf), "c1", pod.Path(), "net1", podArgs("default", "p1"))
	if ce == nil || ce.Code != 106 || !contains(ce.Details, "refusing kubeconfig") {
		t.Errorf("ADD with a world-writable kubeconfig: %+v", ce)
	}
	e.assertNoAttachments(t, "untrusted socket and kubeconfig")
}

// A network config reaches devplumb from a NetworkAttachmentDefinition's
// author, any namespace user: it may not name any of the node's settings
// (nodeconfig.Keys), which only the node config sets. For each key, with
// and without the node agent: ADD fails with code 7 naming the key and the
// node config, claims and writes nothing (no state record, no device-info
// file, nothing in the directories it names), never runs the kubeconfig's
// exec plugin; DEL of the same config succeeds. A config padded to ~700 KB
// gets the same error (no fallback runs it).
func TestNADCannotNameNodeSettings(t *testing.T) {
	for _, withAgent := range []bool{false, true} {
		name := "no agent"
		if withAgent {
			name = "agent"
		}
		t.Run(name, func(t *testing.T) { testNADCannotNameNodeSettings(t, withAgent) })
	}
}

func testNADCannotNameNodeSettings(t *testing.T, withAgent bool) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.pciPod("p1", "0000:05:00.1")
	e.pr.SetAllocatable(&v1.AllocatableResourcesResponse{})
	// The env's own node config (its kubelet, directories): the calls name it.
	net, node := e.split(e.conf("fast-net", e.recorder(nil)))
	e.extraEnv = []string{nodeconfigtest.Env(node)}
	e.verbatim = true
	t.Cleanup(func() { e.extraEnv, e.verbatim = nil, false })
	url := agentOrNone(t, e, node, withAgent)
	hostile := t.TempDir()
	values, marker := hostileNodeSettings(t, e, hostile)
	padded := maps.Clone(net)
	padded["delegate"] = e.recorder(map[string]any{"padding": strings.Repeat("x", 700<<10)})
	padded["kubeconfig"] = values["kubeconfig"]
	cases := []nodeKeyCase{{"kubeconfig in a 700 KB config", "kubeconfig", padded}}
	for _, k := range nodeconfig.Keys {
		c := maps.Clone(net)
		c[k] = values[k]
		if k == "trustDeviceID" {
			c["deviceID"] = "0000:05:00.1"
		}
		cases = append(cases, nodeKeyCase{k, k, c})
	}
	for _, c := range cases {
		checkNodeKeyRefused(t, e, c, pod.Path(), hostile)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the kubeconfig's exec plugin ran")
	}
	if withAgent {
		fams := scrape(t, url)
		if got := counter(fams, "devplumb_agent_requests_total", map[string]string{"request": "prepare", "command": "ADD"}); got != float64(len(cases)) {
			t.Errorf("the agent prepared %v ADDs, want %d", got, len(cases))
		}
	}
}

// nodeKeyCase is a network config setting key, a node config setting.
type nodeKeyCase struct {
	name, key string
	conf      map[string]any
}

// agentOrNone starts a real agent serving the calls with node (its metrics'
// URL), or names a socket nobody serves.
func agentOrNone(t *testing.T, e *env, node string, withAgent bool) string {
	t.Helper()
	if !withAgent {
		t.Setenv("DEVPLUMB_AGENT_SOCKET", filepath.Join(t.TempDir(), "none.sock"))
		return ""
	}
	dir, err := os.MkdirTemp("", "agent") // t.TempDir() may be too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket, metricsSocket := filepath.Join(dir, "agent.sock"), filepath.Join(dir, "agent-metrics.sock")
	startAgent(t, socket, metricsSocket, node)
	t.Setenv("DEVPLUMB_AGENT_SOCKET", socket)
	url, _ := startPhaseMetrics(t, e.stateDir, metricsSocket)
	return url
}

// hostileNodeSettings are what a hostile author would name, one per node
// config key: a root-owned kubeconfig whose user is an exec plugin (devplumb
// runs as root; it would create marker), a socket, directories and a log
// file in hostile, the kubelet check switched off.
func hostileNodeSettings(t *testing.T, e *env, hostile string) (map[string]any, string) {
	t.Helper()
	marker := filepath.Join(hostile, "MARKER")
	kcDir := filepath.Join(e.root, "kc")
	kubeconfig := filepath.Join(kcDir, "kubeconfig")
	if err := os.Mkdir(kcDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: sh, args: ["-c", "touch `+marker+`"], interactiveMode: Never}}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	values := map[string]any{
		"kubeconfig":         kubeconfig,
		"podResourcesSocket": filepath.Join(hostile, "kubelet.sock"),
		"deviceInfoDir":      filepath.Join(hostile, "devinfo"),
		"stateDir":           filepath.Join(hostile, "state"),
		"logFile":            filepath.Join(hostile, "devplumb.log"),
		"trustDeviceID":      true,
	}
	if len(values) != len(nodeconfig.Keys) {
		t.Fatalf("keys %v, test has %d", nodeconfig.Keys, len(values))
	}
	return values, marker
}

// checkNodeKeyRefused: ADD of c's config fails with code 7 naming the key
// and the node config, claims, writes and runs nothing; DEL succeeds.
func checkNodeKeyRefused(t *testing.T, e *env, c nodeKeyCase, netns, hostile string) {
	t.Helper()
	args := podArgs("default", "p1")
	stdin := mustJSON(t, c.conf)
	_, ce := e.run("ADD", stdin, "c1", netns, "net1", args)
	if ce == nil || ce.Code != types.ErrInvalidNetworkConfig || !contains(ce.Msg, `"`+c.key+`"`) || !contains(ce.Msg, "node config") {
		t.Errorf("%s: ADD %+v, want code 7 naming %q and the node config", c.name, ce, c.key)
	}
	if st := e.state(); len(st) != 0 {
		t.Errorf("%s: ADD claimed %+v", c.name, st)
	}
	e.assertNoAttachments(t, c.name)
	if _, err := os.Stat(e.recordDir); err == nil {
		t.Errorf("%s: the delegate ran", c.name)
	}
	if _, ce := e.run("DEL", stdin, "c1", netns, "net1", args); ce != nil {
		t.Errorf("%s: DEL %+v", c.name, ce)
	}
	if ents, _ := os.ReadDir(hostile); len(ents) != 0 {
		t.Errorf("%s: written in the directory the network config names: %v", c.name, ents)
	}
	os.RemoveAll(e.recordDir) // DEL ran the delegate's DEL
}
