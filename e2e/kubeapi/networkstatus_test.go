package kubeapi_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cni/kube"
)

const nodeName = "node-a"

// otherEntry is what the cluster's default network (or Multus) wrote before devplumb.
var otherEntry = nadv1.NetworkStatus{Name: "cluster-default", Interface: "eth0", IPs: []string{"192.0.2.2"}, Default: true}

func pciEntry(network, ifName, addr string) nadv1.NetworkStatus {
	return nadv1.NetworkStatus{Name: network, Interface: ifName, Mac: "02:00:00:00:00:01",
		DeviceInfo: &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypePCI, Version: nadv1.DeviceInfoVersion,
			Pci: &nadv1.PciDevice{PciAddress: addr}}}
}

func newClient(t *testing.T, timeout time.Duration) *kube.Client {
	t.Helper()
	c, err := kube.New(srv.Kubeconfig, timeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func annotationWith(t *testing.T, entries ...nadv1.NetworkStatus) map[string]string {
	t.Helper()
	b, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{nadv1.NetworkStatusAnnot: string(b)}
}

func wantStatus(t *testing.T, got []nadv1.NetworkStatus, want ...nadv1.NetworkStatus) {
	t.Helper()
	if len(want) == 0 {
		want = nil
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("network-status:\n%s\nwant:\n%s", g, w)
	}
}

func TestNetworkStatusAddMergeReplaceRemove(t *testing.T) {
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "merge", nodeName, annotationWith(t, otherEntry))
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, 10*time.Second)
	ns, name, uid := pod.Namespace, pod.Name, string(pod.UID)

	net1 := pciEntry("default/sriov-a", "net1", "0000:18:02.5")
	if err := c.SetNetworkStatus(e2etest.Ctx(t), ns, name, uid, net1); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, ns, name), otherEntry, net1)

	// Same network and interface again: replaced in place, not appended.
	net1b := pciEntry("default/sriov-a", "net1", "0000:18:02.6")
	if err := c.SetNetworkStatus(e2etest.Ctx(t), ns, name, uid, net1b); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, ns, name), otherEntry, net1b)

	// Same network, another interface: a separate entry.
	net2 := pciEntry("default/sriov-a", "net2", "0000:18:02.7")
	if err := c.SetNetworkStatus(e2etest.Ctx(t), ns, name, uid, net2); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, ns, name), otherEntry, net1b, net2)

	if err := c.RemoveNetworkStatus(e2etest.Ctx(t), ns, name, uid, "default/sriov-a", "net1"); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, ns, name), otherEntry, net2)
	// DEL twice is fine.
	if err := c.RemoveNetworkStatus(e2etest.Ctx(t), ns, name, uid, "default/sriov-a", "net1"); err != nil {
		t.Fatalf("second DEL: %v", err)
	}
	if err := c.RemoveNetworkStatus(e2etest.Ctx(t), ns, name, uid, "default/sriov-a", "net2"); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, ns, name), otherEntry)
}

func TestNetworkStatusRemovesAnnotationWhenLastEntryGoes(t *testing.T) {
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "last", nodeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, 10*time.Second)
	e := pciEntry("default/hostdev", "net1", "0000:00:05.0")
	if err := c.SetNetworkStatus(e2etest.Ctx(t), "default", "last", string(pod.UID), e); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, "default", "last"), e)
	if err := c.RemoveNetworkStatus(e2etest.Ctx(t), "default", "last", string(pod.UID), e.Name, e.Interface); err != nil {
		t.Fatal(err)
	}
	got, err := srv.Client.CoreV1().Pods("default").Get(e2etest.Ctx(t), "last", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got.Annotations[nadv1.NetworkStatusAnnot]; ok {
		t.Fatalf("annotation left behind: %q", v)
	}
}

func TestNetworkStatusRecreatedPodNeverTouched(t *testing.T) {
	old, err := srv.CreatePod(e2etest.Ctx(t), "default", "recreated", nodeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.DeletePod(e2etest.Ctx(t), "default", "recreated"); err != nil {
		t.Fatal(err)
	}
	mine := pciEntry("default/sriov-a", "net1", "0000:18:02.5")
	cur, err := srv.CreatePod(e2etest.Ctx(t), "default", "recreated", nodeName, annotationWith(t, otherEntry, mine))
	if err != nil {
		t.Fatal(err)
	}
	if cur.UID == old.UID {
		t.Fatal("recreated pod kept its UID")
	}
	c := newClient(t, 10*time.Second)
	err = c.SetNetworkStatus(e2etest.Ctx(t), "default", "recreated", string(old.UID), pciEntry("default/sriov-a", "net1", "0000:99:00.0"))
	if !errors.Is(err, kube.ErrPodUIDMismatch) {
		t.Fatalf("ADD for the old pod: got %v, want ErrPodUIDMismatch", err)
	}
	// DEL for the old pod succeeds and leaves the new pod's identical-looking entry alone.
	if err := c.RemoveNetworkStatus(e2etest.Ctx(t), "default", "recreated", string(old.UID), mine.Name, mine.Interface); err != nil {
		t.Fatalf("DEL for the old pod: %v", err)
	}
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, "default", "recreated"), otherEntry, mine)
}

func TestNetworkStatusPodGone(t *testing.T) {
	c := newClient(t, 10*time.Second)
	if err := c.RemoveNetworkStatus(e2etest.Ctx(t), "default", "never-existed", "1234", "default/x", "net1"); err != nil {
		t.Fatalf("DEL of a pod that is gone: %v", err)
	}
	err := c.SetNetworkStatus(e2etest.Ctx(t), "default", "never-existed", "1234", pciEntry("default/x", "net1", "0000:00:01.0"))
	if !errors.Is(err, kube.ErrPodNotFound) {
		t.Fatalf("ADD for a missing pod: got %v, want ErrPodNotFound", err)
	}
}

func TestNetworkStatusBadAnnotation(t *testing.T) {
	bad := map[string]string{nadv1.NetworkStatusAnnot: "{not a list"}
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "bad-annotation", nodeName, bad)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, 10*time.Second)
	err = c.SetNetworkStatus(e2etest.Ctx(t), "default", pod.Name, string(pod.UID), pciEntry("default/x", "net1", "0000:00:01.0"))
	if !errors.Is(err, kube.ErrBadAnnotation) {
		t.Fatalf("ADD over an unreadable annotation: got %v, want ErrBadAnnotation", err)
	}
	if err := c.RemoveNetworkStatus(e2etest.Ctx(t), "default", pod.Name, string(pod.UID), "default/x", "net1"); err != nil {
		t.Fatalf("DEL over an unreadable annotation: %v", err)
	}
	got, err := srv.Client.CoreV1().Pods("default").Get(e2etest.Ctx(t), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[nadv1.NetworkStatusAnnot] != "{not a list" {
		t.Fatalf("someone else's annotation was changed: %q", got.Annotations[nadv1.NetworkStatusAnnot])
	}
}

// TestNetworkStatusKeepsForeignEntriesExactly: another writer's entry, with keys this NAD
// client version does not know and without "dns", is still the same JSON after devplumb
// wrote and removed its own entry next to it.
func TestNetworkStatusKeepsForeignEntriesExactly(t *testing.T) {
	const foreign = `{"name":"cluster-default","interface":"eth0","ips":["192.0.2.2"],"default":true,` +
		`"x-vendor":{"queue":7},"device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:00.1","x-new":"kept"}}}`
	annot := map[string]string{nadv1.NetworkStatusAnnot: "[" + foreign + "]"}
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "foreign", nodeName, annot)
	e2etest.Must(t, err)
	c := newClient(t, 10*time.Second)
	mine := pciEntry("default/sriov-a", "net1", "0000:18:02.5")
	e2etest.Must(t, c.SetNetworkStatus(e2etest.Ctx(t), "default", pod.Name, string(pod.UID), mine))
	raw := rawStatusOf(t, "default", pod.Name)
	if len(raw) != 2 {
		t.Fatalf("network-status has %d entries, want 2", len(raw))
	}
	wantSameJSON(t, raw[0], foreign)
	e2etest.Must(t, c.RemoveNetworkStatus(e2etest.Ctx(t), "default", pod.Name, string(pod.UID), mine.Name, mine.Interface))
	raw = rawStatusOf(t, "default", pod.Name)
	if len(raw) != 1 {
		t.Fatalf("network-status has %d entries after DEL, want 1", len(raw))
	}
	wantSameJSON(t, raw[0], foreign)
}

func rawStatusOf(t *testing.T, namespace, name string) []json.RawMessage {
	t.Helper()
	pod, err := srv.Client.CoreV1().Pods(namespace).Get(e2etest.Ctx(t), name, metav1.GetOptions{})
	e2etest.Must(t, err)
	var list []json.RawMessage
	if err := json.Unmarshal([]byte(pod.Annotations[nadv1.NetworkStatusAnnot]), &list); err != nil {
		t.Fatalf("pod %s/%s: network-status is not a list: %v", namespace, name, err)
	}
	return list
}

func wantSameJSON(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	e2etest.Must(t, json.Unmarshal(got, &g))
	e2etest.Must(t, json.Unmarshal([]byte(want), &w))
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("someone else's entry changed:\n%s\nwant\n%s", got, want)
	}
}
