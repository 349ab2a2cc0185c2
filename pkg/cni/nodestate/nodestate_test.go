package nodestate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/base/atomicfile"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

const res = "example.com/veth"

type node struct {
	paths Paths
	srv   *podresourcestest.Server
	state *attachment.Store
	files *devinfo.Store
}

func newNode(t *testing.T) *node {
	srv := podresourcestest.NewServer(t)
	dir := t.TempDir()
	p := Paths{PodResources: srv.Socket, DeviceInfoDir: filepath.Join(dir, "devinfo"), StateDir: filepath.Join(dir, "state")}
	return &node{paths: p, srv: srv, state: attachment.New(p.StateDir), files: devinfo.NewStore(p.DeviceInfoDir)}
}

func (n *node) pod(name string, ids ...string) {
	n.srv.SetPod(&v1.PodResources{Namespace: "ns", Name: name, Containers: []*v1.ContainerResources{{
		Name: "c", Devices: []*v1.ContainerDevices{{ResourceName: res, DeviceIds: ids}},
	}}})
}

// attach records an attachment and its CNI file, as a finished ADD leaves them.
func (n *node) attach(t *testing.T, pod, cid, ifname, dev string) string {
	t.Helper()
	cni, _ := n.files.CNIPath(devinfo.CNIFileName("net", cid, ifname))
	writeFile(t, cni, `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2"}}`)
	err := n.state.Put(&attachment.Record{
		Key: attachment.Key{Network: "net", ContainerID: cid, IfName: ifname},
		Pod: attachment.Pod{Namespace: "ns", Name: pod}, ResourceName: res, DeviceID: dev,
		CNIFile: cni, Complete: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cni
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCollectHealthyNode(t *testing.T) {
	n := newNode(t)
	n.pod("a", "veth1", "veth2")
	n.attach(t, "a", "c1", "net1", "veth1")
	n.attach(t, "a", "c1", "net2", "veth2")
	v, err := Collect(context.Background(), n.paths)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Problems) != 0 {
		t.Errorf("problems on a healthy node: %v", v.Problems)
	}
	if len(v.Pods) != 1 || strings.Join(v.Pods[0].Devices[res], ",") != "veth1,veth2" {
		t.Errorf("pods = %+v", v.Pods)
	}
	if len(v.Attachments) != 2 || len(v.Files) != 2 || !v.Files[0].Owned {
		t.Errorf("attachments %+v files %+v", v.Attachments, v.Files)
	}
	for _, a := range v.Attachments {
		if a.NoCNIFile {
			t.Errorf("%s: CNI file %s called missing", a.IfName, a.CNIFile)
		}
	}
	os.Remove(v.Attachments[0].CNIFile)
	if v, _ = Collect(context.Background(), n.paths); !v.Attachments[0].NoCNIFile || v.Attachments[1].NoCNIFile {
		t.Errorf("a removed CNI file is not reported: %+v", v.Attachments)
	}
}

func TestCollectFindsProblems(t *testing.T) {
	n := newNode(t)
	n.pod("a", "veth1")
	n.attach(t, "a", "c1", "net1", "veth1")
	n.attach(t, "gone", "c2", "net1", "veth2") // pod no longer on the node
	orphan, _ := n.files.CNIPath("other-c3_net1")
	writeFile(t, orphan, `{"type":"pci"}`) // unowned and invalid
	v, err := Collect(context.Background(), n.paths)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(v.Problems, "\n")
	for _, want := range []string{
		"pod ns/gone no longer has device veth2",
		orphan + ": no devplumb attachment owns",
		orphan + ": invalid device-info",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("problems lack %q:\n%s", want, all)
		}
	}
	if len(v.Problems) != 3 {
		t.Errorf("want 3 problems, got %d:\n%s", len(v.Problems), all)
	}
}

func TestCollectWithoutKubelet(t *testing.T) {
	n := newNode(t)
	n.paths.PodResources = filepath.Join(t.TempDir(), "missing.sock")
	n.attach(t, "a", "c1", "net1", "veth1")
	v, err := Collect(context.Background(), n.paths)
	if err != nil {
		t.Fatal(err)
	}
	if v.Pods != nil || !strings.Contains(v.PodResourcesError, "not found") {
		t.Errorf("pods %v error %q", v.Pods, v.PodResourcesError)
	}
	if v.Attachments[0].Stale {
		t.Error("attachment called stale without the kubelet")
	}
	if _, err := GC(context.Background(), n.paths, GCOptions{}); err == nil {
		t.Error("GC ran without the kubelet")
	}
}

func TestGC(t *testing.T) {
	n := newNode(t)
	n.pod("a", "veth1")
	keep := n.attach(t, "a", "c1", "net1", "veth1")
	stale := n.attach(t, "gone", "c2", "net1", "veth2")
	orphan, _ := n.files.CNIPath("other-c3_net1")
	writeFile(t, orphan, `{}`)
	ctx := context.Background()

	dry, err := GC(ctx, n.paths, GCOptions{DryRun: true, Orphans: true})
	if err != nil || len(dry) != 3 {
		t.Fatalf("dry run: %v %v", dry, err)
	}
	for _, p := range []string{keep, stale, orphan} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("dry run removed %s", p)
		}
	}

	if _, err := GC(ctx, n.paths, GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Error("stale CNI file kept")
	}
	if _, err := os.Stat(orphan); err != nil {
		t.Error("orphan removed without --orphans")
	}
	if a, _ := n.state.Get(attachment.Key{Network: "net", ContainerID: "c2", IfName: "net1"}); a != nil {
		t.Error("stale record kept")
	}
	if a, _ := n.state.Get(attachment.Key{Network: "net", ContainerID: "c1", IfName: "net1"}); a == nil {
		t.Error("live record removed")
	}

	if _, err := GC(ctx, n.paths, GCOptions{Orphans: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Error("orphan kept with --orphans")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Error("live CNI file removed")
	}
}

// GC judges on the kubelet's answer at GC time, not on an earlier look: a
// pod admitted (and attached) after inspect ran keeps its record and file.
func TestGCAsksTheKubeletAfterReadingRecords(t *testing.T) {
	n := newNode(t)
	cni := n.attach(t, "late", "c1", "net1", "veth1")
	v, err := Collect(context.Background(), n.paths)
	if err != nil || !v.Attachments[0].Stale {
		t.Fatalf("before the pod is listed the record looks stale: %+v %v", v.Attachments, err)
	}
	n.pod("late", "veth1")
	acts, err := GC(context.Background(), n.paths, GCOptions{Orphans: true})
	if err != nil || len(acts) != 0 {
		t.Fatalf("gc of a live record: %v %v", acts, err)
	}
	if a, _ := n.state.Get(attachment.Key{Network: "net", ContainerID: "c1", IfName: "net1"}); a == nil {
		t.Error("live record removed")
	}
	if _, err := os.Stat(cni); err != nil {
		t.Error("live CNI file removed")
	}
}

// A record the kubelet no longer lists but whose netns is still there is
// kept: the runtime's DEL has yet to come (or the kubelet just restarted).
func TestGCKeepsRecordWhoseNetnsExists(t *testing.T) {
	n := newNode(t)
	cni := n.attach(t, "gone", "c1", "net1", "veth1")
	netns := filepath.Join(t.TempDir(), "netns")
	writeFile(t, netns, "")
	k := attachment.Key{Network: "net", ContainerID: "c1", IfName: "net1"}
	a, _ := n.state.Get(k)
	a.NetNS = netns
	if err := n.state.Put(a); err != nil {
		t.Fatal(err)
	}
	acts, err := GC(context.Background(), n.paths, GCOptions{})
	if err != nil || len(acts) != 1 || acts[0].Verb != "keep" || !strings.Contains(acts[0].Why, netns) {
		t.Fatalf("gc: %v %v", acts, err)
	}
	if a, _ := n.state.Get(k); a == nil {
		t.Error("record of a live netns removed")
	}
	if _, err := os.Stat(cni); err != nil {
		t.Error("CNI file of a live netns removed")
	}
	os.Remove(netns)
	if acts, err := GC(context.Background(), n.paths, GCOptions{}); err != nil || len(acts) != 2 {
		t.Fatalf("gc once the netns is gone: %v %v", acts, err)
	}
}

// A record naming a file outside the device-info directories (edited by
// hand, or corrupted) never makes gc delete that file.
func TestGCRemovesOnlyDeviceInfoFiles(t *testing.T) {
	n := newNode(t)
	victim := filepath.Join(t.TempDir(), "victim")
	writeFile(t, victim, "precious")
	k := attachment.Key{Network: "net", ContainerID: "c1", IfName: "net1"}
	err := n.state.Put(&attachment.Record{Key: k, Pod: attachment.Pod{Namespace: "ns", Name: "gone"},
		ResourceName: res, DeviceID: "veth1", CNIFile: victim, Complete: true})
	if err != nil {
		t.Fatal(err)
	}
	acts, err := GC(context.Background(), n.paths, GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("gc removed %s: %v", victim, acts)
	}
	if a, _ := n.state.Get(k); a != nil {
		t.Error("stale record kept")
	}
}

// With unreadable records gc cannot tell which CNI files they own, so it
// removes no unowned file.
func TestGCOrphansWaitForCorruptRecords(t *testing.T) {
	n := newNode(t)
	orphan, _ := n.files.CNIPath(devinfo.CNIFileName("net", "c9", "net1"))
	writeFile(t, orphan, `{}`)
	writeFile(t, filepath.Join(n.paths.StateDir, "attachments", "net:c9:net1.json"), "{")
	acts, err := GC(context.Background(), n.paths, GCOptions{Orphans: true})
	if err != nil || len(acts) != 1 || acts[0].Verb != "keep" {
		t.Fatalf("gc: %v %v", acts, err)
	}
	if _, err := os.Stat(orphan); err != nil {
		t.Error("file of a corrupt record removed")
	}
}

// GC runs the recorded delegates' DEL before it drops a stale record, so the
// real host-local plugin releases its lease; a record whose delegate DEL
// fails is kept for the next gc.
func TestGCRunsDelegateDEL(t *testing.T) {
	cniPath := testenv.CNIPlugins(t)
	n := newNode(t)
	leases := t.TempDir()
	conf := []byte(`{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"host-local",` +
		`"ipam":{"type":"host-local","subnet":"10.254.7.0/24","dataDir":"` + leases + `"}}]}`)
	netns := testenv.NetNS(t)
	list, err := delegate.ListFromBytes(conf)
	if err != nil {
		t.Fatal(err)
	}
	inv := delegate.New(cniPath, delegate.CacheDir(n.paths.StateDir, "net"))
	if _, err := inv.Add(context.Background(), list, &libcni.RuntimeConf{ContainerID: "c9", IfName: "net1", NetNS: netns.Path()}); err != nil {
		t.Fatal(err)
	}
	lease := filepath.Join(leases, "net", "10.254.7.2")
	record := func(cid, netnsPath string, delegateConf []byte) {
		err := n.state.Put(&attachment.Record{Key: attachment.Key{Network: "net", ContainerID: cid, IfName: "net1"},
			Pod: attachment.Pod{Namespace: "ns", Name: "gone"}, ResourceName: res, DeviceID: "veth-" + cid,
			Delegate: delegateConf, NetNS: netnsPath, Complete: true, CNIPath: cniPath})
		if err != nil {
			t.Fatal(err)
		}
	}
	record("c9", netns.Path(), conf)
	record("c8", "", []byte(`{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"no-such-plugin"}]}`))
	// No --cni-path: gc runs the delegates from the CNI path their ADD recorded.
	opts := GCOptions{}

	// The netns still exists: DEL is the runtime's, the lease stays.
	acts, err := GC(context.Background(), n.paths, opts)
	if _, serr := os.Stat(lease); err != nil || serr != nil {
		t.Fatalf("gc with the netns there: %v, lease: %v, acts %v", err, serr, acts)
	}
	testenv.RemoveNetNS(t, netns)
	acts, err = GC(context.Background(), n.paths, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lease); !os.IsNotExist(err) {
		t.Errorf("host-local lease %s kept after gc: %v (acts %v)", lease, err, acts)
	}
	if a, _ := n.state.Get(attachment.Key{Network: "net", ContainerID: "c9", IfName: "net1"}); a != nil {
		t.Error("record of the released attachment kept")
	}
	if a, _ := n.state.Get(attachment.Key{Network: "net", ContainerID: "c8", IfName: "net1"}); a == nil {
		t.Error("record whose delegate DEL failed was removed: its lease would leak")
	}
	if !strings.Contains(fmt.Sprint(acts), "keep claim net/c8/net1") || !strings.Contains(fmt.Sprint(acts), "no-such-plugin") {
		t.Errorf("acts do not say why c8 was kept: %v", acts)
	}
}

// A DRA attachment is live while the kubelet lists its pod, whatever devices the pod
// shows (the kubelet never reports a claim no container references); once the pod is
// gone it is stale, and gc takes it.
func TestDRAAttachmentLivesWithItsPod(t *testing.T) {
	n := newNode(t)
	n.srv.SetPod(&v1.PodResources{Namespace: "ns", Name: "dra", Containers: []*v1.ContainerResources{{Name: "c"}}})
	for i, pod := range []string{"dra", "gone"} {
		cni, _ := n.files.CNIPath(devinfo.CNIFileName("net", pod, "net1"))
		writeFile(t, cni, `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2"}}`)
		err := n.state.Put(&attachment.Record{
			Key: attachment.Key{Network: "net", ContainerID: pod, IfName: "net1"},
			Pod: attachment.Pod{Namespace: "ns", Name: pod}, ResourceName: res, DeviceID: fmt.Sprintf("0000:01:02.%d", i), CNIFile: cni, Complete: true,
			Claim: &attachment.ClaimDevice{Namespace: "ns", Name: pod + "-net", Driver: "netdev.devplumb.io", Pool: "node", Device: fmt.Sprintf("pci-%d", i)},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	v, err := Collect(context.Background(), n.paths)
	if err != nil {
		t.Fatal(err)
	}
	stale := map[string]bool{}
	for _, a := range v.Attachments {
		stale[a.ContainerID] = a.Stale
	}
	if stale["dra"] || !stale["gone"] {
		t.Errorf("stale: %v, want only the gone pod's", stale)
	}
	if all := strings.Join(v.Problems, "\n"); len(v.Problems) != 1 || !strings.Contains(all, "pod ns/gone is no longer on the node (device of ResourceClaim ns/gone-net") {
		t.Errorf("problems:\n%s", all)
	}
}

// A device the caller injected (Multus's runtimeConfig.deviceID, recorded under
// no resource) is one device with the resource's device of that ID: inspect
// reports it held twice; gc judges it by the same rule as any other record,
// against all the pod's devices.
func TestInjectedDeviceJudgedLikeAnyOther(t *testing.T) {
	n := newNode(t)
	n.pod("a", "veth1", "veth2")
	n.attach(t, "a", "c1", "net1", "veth1")
	n.attach(t, "a", "c1", "net2", "veth2")
	injected := func(pod, cid, dev string) attachment.Key {
		k := attachment.Key{Network: "inj", ContainerID: cid, IfName: "net3"}
		if err := n.state.Put(&attachment.Record{Key: k, Pod: attachment.Pod{Namespace: "ns", Name: pod}, DeviceID: dev, Complete: true}); err != nil {
			t.Fatal(err)
		}
		return k
	}
	twice := injected("a", "c1", "veth1")
	v, err := Collect(context.Background(), n.paths)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(v.Problems, "\n"), "device veth1 of "+res+" is held twice") {
		t.Errorf("an injected device held by a resourceName attachment too: problems %v", v.Problems)
	}
	if err := n.state.Release(twice); err != nil {
		t.Fatal(err)
	}

	live := injected("a", "c1", "veth2")
	gone := injected("gone", "c9", "veth3")
	if _, err := GC(context.Background(), n.paths, GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if r, _ := n.state.Get(gone); r != nil {
		t.Error("the injected record of a pod the kubelet no longer lists was kept")
	}
	if r, _ := n.state.Get(live); r == nil {
		t.Error("the injected record of a device still the pod's was removed")
	}
}

// A devplumb killed between an atomic write's create and its rename leaves
// a hidden temp file beside the records or the CNI device-info files: gc
// removes it once it is old, and leaves a live writer's (fresh) one, the
// records and the files alone.
func TestGCRemovesStaleTempFiles(t *testing.T) {
	n := newNode(t)
	n.pod("a", "veth1")
	cni := n.attach(t, "a", "c1", "net1", "veth1")
	records := filepath.Join(n.paths.StateDir, "attachments")
	old := time.Now().Add(-2 * atomicfile.TempAge)
	stale := []string{filepath.Join(records, ".net:c2:net1.json.tmp-42"), filepath.Join(filepath.Dir(cni), ".net-c2_net1.tmp-7")}
	fresh := filepath.Join(records, ".net:c3:net1.json.tmp-9")
	for _, p := range append(slices.Clone(stale), fresh) {
		writeFile(t, p, "{")
		if p != fresh {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	removed := func(acts []GCAction) []string {
		var got []string
		for _, a := range acts {
			if a.Verb == "remove" {
				got = append(got, strings.TrimPrefix(a.What, "file "))
			}
		}
		return got
	}
	ctx := context.Background()
	dry, err := GC(ctx, n.paths, GCOptions{DryRun: true})
	if err != nil || !slices.Equal(removed(dry), stale) {
		t.Fatalf("dry run: %v, %v; want the removal of %q", dry, err, stale)
	}
	if _, err := os.Stat(stale[0]); err != nil {
		t.Fatalf("the dry run removed %s", stale[0])
	}
	acts, err := GC(ctx, n.paths, GCOptions{})
	if err != nil || !slices.Equal(removed(acts), stale) {
		t.Fatalf("gc: %v, %v; want the removal of %q", acts, err, stale)
	}
	for _, p := range stale {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s kept: %v", p, err)
		}
	}
	for _, p := range []string{fresh, cni} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	if a, _ := n.state.Get(attachment.Key{Network: "net", ContainerID: "c1", IfName: "net1"}); a == nil {
		t.Error("the live record removed")
	}
}
