package kubeapi_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// A failed ADD of the devplumb binary leaves one Warning Event on the pod that
// kubectl describe pod lists (core/v1 Events selected by the pod's kind, name,
// namespace and UID), naming the network, the interface, the device and why;
// with "events": "all" a successful ADD leaves a Normal AddedInterface as well.
func TestDevplumbBinaryEventsOnPod(t *testing.T) {
	n := newNode(t)
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "dp-events", nodeName, nil)
	e2etest.Must(t, err)
	netns := testenv.NetNS(t).Path()
	args := n.podArgs(pod.Name, string(pod.UID))

	// The kubelet gave the pod a device that is no link on the node: host-device fails.
	missing := n.dev + "x"
	n.pr.SetPod(&v1.PodResources{Namespace: "default", Name: pod.Name, Containers: []*v1.ContainerResources{{
		Name: "c", Devices: []*v1.ContainerDevices{{ResourceName: resourceName, DeviceIds: []string{missing}}},
	}}})
	res := n.devplumb(t, "ADD", n.conf(nil), netns, args)
	if res.Code != 103 {
		t.Fatalf("ADD of a device that is not there: %+v, want the delegate's failure (103)", res)
	}
	evs := describeEvents(t, pod, 1)
	if len(evs) != 1 {
		t.Fatalf("events on the pod %+v, want one", evs)
	}
	e := evs[0]
	host, _ := os.Hostname()
	if e.Type != corev1.EventTypeWarning || e.Reason != "AttachmentFailed" || e.ReportingController != "devplumb" ||
		e.ReportingInstance != strings.ToLower(host) {
		t.Errorf("event %s %s by %s/%s, want Warning AttachmentFailed by devplumb/%s",
			e.Type, e.Reason, e.ReportingController, e.ReportingInstance, strings.ToLower(host))
	}
	for _, want := range []string{"network default/" + n.network, "interface net1", "device " + missing, res.Msg} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("event message %q does not say %q", e.Message, want)
		}
	}
	t.Logf("kubectl describe pod: %s %s %s: %s", e.Type, e.Reason, e.ReportingController, e.Message)

	// The device the kubelet gave is there now: ADD succeeds and, asked to, says so.
	n.givePod(pod.Name)
	if res := n.devplumb(t, "ADD", n.conf(map[string]any{"events": "all"}), netns, args); res.Code != 0 {
		t.Fatalf("ADD: %+v", res)
	}
	evs = describeEvents(t, pod, 2)
	if len(evs) != 2 {
		t.Fatalf("events on the pod %+v, want the failure and an AddedInterface", evs)
	}
	added := evs[0]
	if added.Reason != "AddedInterface" {
		added = evs[1]
	}
	want := "Add net1 [192.0.2.10] from default/" + n.network + " (device " + n.dev + ")"
	if added.Type != corev1.EventTypeNormal || added.Reason != "AddedInterface" || added.Message != want {
		t.Errorf("event %s %s %q, want Normal AddedInterface %q", added.Type, added.Reason, added.Message, want)
	}
	if res := n.devplumb(t, "DEL", n.conf(nil), netns, args); res.Code != 0 {
		t.Fatalf("DEL: %+v", res)
	}
}

// describeEvents lists the pod's Events as kubectl describe pod does, waiting
// a little for want of them.
func describeEvents(t *testing.T, pod *corev1.Pod, want int) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod.Name,
		"involvedObject.namespace": pod.Namespace, "involvedObject.uid": string(pod.UID)}
	var list *corev1.EventList
	var err error
	// devplumb's create returned before it exited, but a list may be served
	// from the API server's watch cache, which catches up a moment later.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		list, err = srv.Client.CoreV1().Events(pod.Namespace).List(e2etest.Ctx(t),
			metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
		e2etest.Must(t, err)
		if len(list.Items) >= want || time.Now().After(deadline) {
			break
		}
	}
	return list.Items
}

// An API server that never answers the Event create costs the failed ADD of
// the devplumb binary at most the Event's bound (plugin.DefaultEventTimeout,
// 2s) over the same ADD without an Event, and the ADD fails as it would.
func TestDevplumbBinaryEventWriteHangs(t *testing.T) {
	n := newNode(t)
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "dp-event-hangs", nodeName, nil)
	e2etest.Must(t, err)
	n.pr.SetPod(&v1.PodResources{Namespace: "default", Name: pod.Name, Containers: []*v1.ContainerResources{{
		Name: "c", Devices: []*v1.ContainerDevices{{ResourceName: resourceName, DeviceIds: []string{n.dev + "x"}}},
	}}})
	proxyURL, creates := hangEventCreates(t)
	kc := filepath.Join(t.TempDir(), "hang.kubeconfig")
	e2etest.Must(t, os.WriteFile(kc, []byte(kubeapi.Kubeconfig(proxyURL, srv.Token)), 0o600))
	netns := testenv.NetNS(t).Path()
	args := n.podArgs(pod.Name, string(pod.UID))

	add := func(events string) (e2etest.CNIResult, time.Duration) {
		start := time.Now()
		res := n.devplumb(t, "ADD", n.conf(map[string]any{"kubeconfig": kc, "events": events}), netns, args)
		return res, time.Since(start)
	}
	base, without := add("none")
	res, took := add("failures")
	if base.Code != 103 || res.Code != base.Code || res.Msg != base.Msg {
		t.Fatalf("ADD with the Event write hanging: %+v, want as without an Event: %+v", res, base)
	}
	if got := creates.Load(); got != 1 {
		t.Fatalf("%d Event creates reached the API server, want the one of the second ADD", got)
	}
	const bound, slack = 2 * time.Second, 2 * time.Second
	if took < bound || took > without+bound+slack {
		t.Errorf("ADD took %s with the Event write hanging, %s without an Event: want it to wait the bound %s and no more",
			took, without, bound)
	}
	t.Logf("failed ADD: %s without an Event, %s with its write hanging", without, took)
}

// hangEventCreates is a TLS proxy to the API server that holds every Event
// create unanswered until the test ends and passes everything else on.
func hangEventCreates(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	target, err := url.Parse(srv.URL)
	e2etest.Must(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // local test server
	release := make(chan struct{})
	creates := &atomic.Int32{}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/events") {
			creates.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	hs.StartTLS()
	t.Cleanup(func() {
		close(release) // before Close, which waits for the held requests
		hs.Close()
	})
	return hs.URL, creates
}
