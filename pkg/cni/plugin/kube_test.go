package plugin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// fakeKube is the tiny in-test API server stand-in for the Kube hook.
type fakeKube struct {
	mu       sync.Mutex
	set      []nadv1.NetworkStatus
	setPod   []string
	removed  []string
	nads     map[string]string
	setErr   error
	nadAsked []string
	onRemove func() // runs inside RemoveNetworkStatus
	made     int    // clients built (NewKube calls)
	events   []kube.PodEvent
	eventErr error
	// eventHang, when set, holds RecordPodEvent (ignoring its context) until
	// it is closed or 10s pass; eventAt is when RecordPodEvent was called.
	eventHang chan struct{}
	eventAt   time.Time
}

func (f *fakeKube) RecordPodEvent(_ context.Context, e kube.PodEvent) error {
	f.mu.Lock()
	f.events = append(f.events, e)
	f.eventAt = time.Now()
	hang, err := f.eventHang, f.eventErr
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-time.After(10 * time.Second):
		}
	}
	return err
}

func (f *fakeKube) recorded() ([]kube.PodEvent, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events), f.eventAt
}

func (f *fakeKube) SetNetworkStatus(_ context.Context, ns, name, uid string, e nadv1.NetworkStatus) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.setErr != nil {
		return f.setErr
	}
	f.set = append(f.set, e)
	f.setPod = append(f.setPod, ns+"/"+name+"/"+uid)
	return nil
}

func (f *fakeKube) RemoveNetworkStatusUnless(_ context.Context, ns, name, uid, network, ifName string, keep func() bool) error {
	if keep != nil && keep() {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, strings.Join([]string{ns, name, uid, network, ifName}, "/"))
	if f.onRemove != nil {
		f.onRemove()
	}
	return nil
}

func (f *fakeKube) NADResourceName(_ context.Context, ns, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nadAsked = append(f.nadAsked, ns+"/"+name)
	res, ok := f.nads[ns+"/"+name]
	if !ok {
		return "", errors.New("not found")
	}
	return res, nil
}

type kubeEnv struct {
	t    *testing.T
	kube *fakeKube
	p    *Plugin
	root string
	conf map[string]any
	bin  string
}

func newKubeEnv(t *testing.T) *kubeEnv {
	bin := testenv.Build(t, "./e2e/recorder")
	pr := podresourcestest.NewServer(t)
	pr.SetPod(&v1.PodResources{Namespace: "default", Name: "p1", Containers: []*v1.ContainerResources{{
		Name: "app", Devices: []*v1.ContainerDevices{{ResourceName: "example.com/vf", DeviceIds: []string{"0000:01:02.3"}}},
	}}})
	root := t.TempDir()
	store := devinfo.NewStore(filepath.Join(root, "devinfo"))
	info := &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version, Pci: &devinfo.PciDevice{PciAddress: "0000:01:02.3"}}
	if err := store.WriteDP("example.com/vf", "0000:01:02.3", info); err != nil {
		t.Fatal(err)
	}
	k := &fakeKube{nads: map[string]string{"default/fast-net": "example.com/vf", "infra/sriov": "example.com/vf"}}
	p := &Plugin{Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Timeout: 5 * time.Second,
		NewKube: func(kubeconfig string, _ time.Duration, _ *slog.Logger) (Kube, error) {
			if kubeconfig != "/etc/cni/kc" {
				t.Errorf("kubeconfig %q", kubeconfig)
			}
			k.mu.Lock()
			k.made++
			k.mu.Unlock()
			return k, nil
		}}
	conf := map[string]any{"cniVersion": "1.0.0", "name": "fast-net", "type": "devplumb",
		"podResourcesSocket": pr.Socket, "deviceInfoDir": store.Dir, "stateDir": filepath.Join(root, "state"),
		"kubeconfig": "/etc/cni/kc",
		"delegate":   map[string]any{"type": "recorder", "recordDir": filepath.Join(root, "rec")}}
	return &kubeEnv{t: t, kube: k, p: p, root: root, conf: conf, bin: bin}
}

func (k *kubeEnv) args() *skel.CmdArgs {
	data := nodeconfigtest.SplitEnv(k.t, k.conf)
	return &skel.CmdArgs{ContainerID: "c1", Netns: "/var/run/netns/test", IfName: "net1", Path: k.bin,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=u1", StdinData: data}
}

func (k *kubeEnv) records() []*attachment.Record { return stateRecords(k.t, k.root) }

// ADD reads resourceName from the NAD named by the network, writes the
// network-status entry under the NAD's name, as Multus names it ("<namespace>/<NAD>",
// and the CNI device-info file "<namespace>-<NAD>-<containerID>_<ifname>"); DEL removes it.
func TestKubeHookAddDel(t *testing.T) {
	k := newKubeEnv(t)
	if err := k.p.Add(k.args()); err != nil {
		t.Fatal(err)
	}
	if len(k.kube.nadAsked) != 1 || k.kube.nadAsked[0] != "default/fast-net" {
		t.Errorf("NAD asked %v", k.kube.nadAsked)
	}
	// One client per call: the NAD read and the network-status write share it.
	if k.kube.made != 1 {
		t.Errorf("ADD built %d Kubernetes clients, want 1", k.kube.made)
	}
	if len(k.kube.set) != 1 || k.kube.setPod[0] != "default/p1/u1" {
		t.Fatalf("status set %v for %v", k.kube.set, k.kube.setPod)
	}
	e := k.kube.set[0]
	if st := k.records(); len(st) != 1 || filepath.Base(st[0].CNIFile) != "default-fast-net-c1_net1" {
		t.Errorf("records %+v, want the CNI file default-fast-net-c1_net1", st)
	}
	if e.Name != "default/fast-net" || e.Interface != "net1" || e.DeviceInfo == nil || e.DeviceInfo.Pci.PciAddress != "0000:01:02.3" {
		t.Errorf("entry %+v", e)
	}
	if err := k.p.Del(k.args()); err != nil {
		t.Fatal(err)
	}
	if len(k.kube.removed) != 1 || k.kube.removed[0] != "default/p1/u1/default/fast-net/net1" {
		t.Errorf("removed %v", k.kube.removed)
	}
}

// A DEL without state (an older devplumb's attachment, or state lost) removes the
// entry and the CNI device-info file under both names: today's, the NAD's, and an
// older devplumb's, the config's.
func TestDelWithoutStateFindsOlderNames(t *testing.T) {
	k := newKubeEnv(t)
	k.conf["resourceName"] = "example.com/vf"
	k.conf["networkAttachmentDefinition"] = "nets/fast"
	cni := filepath.Join(k.root, "devinfo", "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, name := range []string{"nets-fast-c1_net1", "fast-net-c1_net1"} {
		f := filepath.Join(cni, name)
		if err := os.WriteFile(f, []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.3"}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if err := k.p.Del(k.args()); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s after DEL: %v", f, err)
		}
	}
	want := []string{"default/p1/u1/nets/fast/net1", "default/p1/u1/fast-net/net1"}
	if !slices.Equal(k.kube.removed, want) {
		t.Errorf("removed %v, want %v", k.kube.removed, want)
	}
}

// DEL tears down the delegate and frees the device before it talks to the
// API server, which may be down and take its whole bound to say so.
func TestKubeHookDelFreesDeviceBeforeStatus(t *testing.T) {
	k := newKubeEnv(t)
	if err := k.p.Add(k.args()); err != nil {
		t.Fatal(err)
	}
	checked := false
	k.kube.onRemove = func() {
		checked = true
		if _, err := os.Stat(filepath.Join(k.root, "rec", "DEL-c1_net1.json")); err != nil {
			t.Errorf("network-status removed before the delegate DEL ran: %v", err)
		}
		if left := k.records(); len(left) != 0 {
			t.Errorf("network-status removed while the record of %s was still held", left[0].DeviceID)
		}
	}
	if err := k.p.Del(k.args()); err != nil {
		t.Fatal(err)
	}
	if !checked {
		t.Fatal("DEL did not remove the network-status entry")
	}
}

func TestKubeHookExplicitNAD(t *testing.T) {
	k := newKubeEnv(t)
	k.conf["networkAttachmentDefinition"] = "infra/sriov"
	if err := k.p.Add(k.args()); err != nil {
		t.Fatal(err)
	}
	if len(k.kube.nadAsked) != 1 || k.kube.nadAsked[0] != "infra/sriov" {
		t.Errorf("NAD asked %v", k.kube.nadAsked)
	}
}

// A NAD's resourceName annotation is checked like the config's: it names
// files under deviceInfoDir/dp.
func TestKubeHookInvalidNADResourceName(t *testing.T) {
	k := newKubeEnv(t)
	k.kube.nads["default/fast-net"] = "example.com/../../etc"
	err := k.p.Add(k.args())
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrNoDeviceSource || !strings.Contains(te.Msg, "NetworkAttachmentDefinition default/fast-net") {
		t.Fatalf("ADD with a bad annotation: %v", err)
	}
	if st := k.records(); len(st) != 0 {
		t.Errorf("records %+v", st)
	}
}

// "required" fails ADD (and rolls back) when the API server fails;
// "best-effort" carries on.
func TestKubeHookRequiredVersusBestEffort(t *testing.T) {
	k := newKubeEnv(t)
	k.kube.setErr = errors.New("forbidden")
	err := k.p.Add(k.args())
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrKube || !strings.Contains(te.Details, "forbidden") {
		t.Fatalf("required: %v", err)
	}
	if c := k.records(); len(c) != 0 {
		t.Errorf("records after failed ADD %+v", c)
	}
	if _, err := os.Stat(filepath.Join(k.root, "rec", "DEL-c1_net1.json")); err != nil {
		t.Errorf("rollback did not DEL the delegate: %v", err)
	}
	k.conf["networkStatus"] = "best-effort"
	if err := k.p.Add(k.args()); err != nil {
		t.Fatalf("best-effort: %v", err)
	}
	if c := k.records(); len(c) != 1 || c[0].NetworkStatus == nil {
		t.Errorf("records %+v", c)
	}
	// The runtime repeats the ADD once the API server is back: the cached
	// result is returned and the entry that could not be written is written.
	k.kube.setErr = nil
	if err := k.p.Add(k.args()); err != nil {
		t.Fatalf("repeated best-effort ADD: %v", err)
	}
	if len(k.kube.set) != 1 || k.kube.set[0].Interface != "net1" {
		t.Errorf("network-status not written on the repeated ADD: %+v", k.kube.set)
	}
}

func TestKubeconfigWithoutClient(t *testing.T) {
	k := newKubeEnv(t)
	k.conf["resourceName"] = "example.com/vf"
	k.p.NewKube = nil
	err := k.p.Add(k.args())
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrKube || !strings.Contains(te.Details, "no Kubernetes client") {
		t.Fatalf("err %v", err)
	}
}

func TestNetworkStatusWithoutSandboxInterface(t *testing.T) {
	r := &current.Result{CNIVersion: "1.0.0", IPs: []*current.IPConfig{{Address: *mustCIDR(t, "192.0.2.5/24")}}}
	e, err := networkStatus(r, "n", "net1", nil)
	if err != nil || e.Interface != "net1" || len(e.IPs) != 1 || e.IPs[0] != "192.0.2.5" {
		t.Errorf("entry %+v %v", e, err)
	}
}

func mustCIDR(t *testing.T, s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	n.IP = ip
	return n
}

// "networkStatus": "none" (a network Multus delegates to, which writes the
// whole list itself) writes and removes no entry although the node config
// has a kubeconfig; the NAD is still read and the record keeps the entry.
func TestNetworkStatusNone(t *testing.T) {
	k := newKubeEnv(t)
	k.conf["networkStatus"] = "none"
	if err := k.p.Add(k.args()); err != nil {
		t.Fatal(err)
	}
	if len(k.kube.set) != 0 || len(k.kube.nadAsked) != 1 {
		t.Errorf("ADD set %v, asked NADs %v: want no entry written and the NAD read", k.kube.set, k.kube.nadAsked)
	}
	if c := k.records(); len(c) != 1 || c[0].NetworkStatus == nil {
		t.Errorf("records %+v: want the entry kept in the record", c)
	}
	if err := k.p.Del(k.args()); err != nil || len(k.kube.removed) != 0 {
		t.Errorf("DEL: %v, removed %v: want nothing removed", err, k.kube.removed)
	}
}

// The network-status entry is written while the completed record is (issue
// 38): an ADD whose record cannot be completed (its device taken over while
// the delegates ran) fails and removes the entry it wrote, unless a newer
// sandbox of the pod holds the attachment now, whose entry it is.
func TestStatusWrittenWithTheRecordIsUndoneWithIt(t *testing.T) {
	result := &current.Result{CNIVersion: "1.0.0", Interfaces: []*current.Interface{{Name: "net1", Sandbox: "/var/run/netns/test"}}}
	for _, newer := range []bool{false, true} {
		k := newKubeEnv(t)
		a, err := k.p.PrepareAdd(k.args())
		if err != nil || a.Delegate == nil {
			t.Fatalf("prepare: %+v, %v", a, err)
		}
		store := attachment.New(filepath.Join(k.root, "state"))
		if err := store.Remove(a.Key); err != nil { // the delegates ran; the device was taken over
			t.Fatal(err)
		}
		if newer {
			rec := *a.rec
			rec.ContainerID = "c2"
			if err := store.Put(&rec); err != nil {
				t.Fatal(err)
			}
		}
		_, err = a.CommitAdd(result, nil)
		wantCode(t, "commit after the takeover", err, ErrNoFreeDevice)
		if !a.UndoPending() {
			t.Fatal("no undo due after the failed commit")
		}
		a.Rollback()
		k.kube.mu.Lock()
		set, removed := len(k.kube.set), len(k.kube.removed)
		k.kube.mu.Unlock()
		switch {
		case !newer && set != removed:
			t.Errorf("entries written %d, removed %d: the failed ADD left its entry", set, removed)
		case newer && removed != 0:
			t.Errorf("the newer sandbox's entry was removed (%d removals)", removed)
		}
	}
}
