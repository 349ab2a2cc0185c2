package kubeapi_test

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
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
