package plugin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/kube"
)

// failDelegate makes the recorder delegate fail its ADD.
func (k *kubeEnv) failDelegate() {
	d := k.conf["delegate"].(map[string]any)
	d["failAdd"] = true
}

// An ADD that fails records one Warning Event on the pod naming the
// network, the interface, the device it took and the CNI error; by default
// ("events": "failures") a successful ADD records none.
func TestAddFailureRecordsEvent(t *testing.T) {
	k := newKubeEnv(t)
	if err := k.p.Add(k.args()); err != nil {
		t.Fatal(err)
	}
	if evs, _ := k.kube.recorded(); len(evs) != 0 {
		t.Fatalf("a successful ADD recorded %+v under the default \"failures\"", evs)
	}
	if err := k.p.Del(k.args()); err != nil {
		t.Fatal(err)
	}
	k.failDelegate()
	err := k.p.Add(k.args())
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrDelegate {
		t.Fatalf("ADD with a failing delegate: %v", err)
	}
	evs, _ := k.kube.recorded()
	if len(evs) != 1 {
		t.Fatalf("events %+v, want one", evs)
	}
	e := evs[0]
	if e.Namespace != "default" || e.Name != "p1" || e.UID != "u1" || !e.Warning || e.Reason != kube.ReasonAttachmentFailed {
		t.Errorf("event %+v, want a Warning AttachmentFailed on default/p1 (u1)", e)
	}
	for _, want := range []string{"network default/fast-net", "interface net1", "device 0000:01:02.3",
		te.Msg, "recorder: failing ADD as configured"} {
		if !strings.Contains(e.Note, want) {
			t.Errorf("note %q does not say %q", e.Note, want)
		}
	}
}

// A failure before any device is taken says so; "events": "none" records
// nothing, even for a failure.
func TestAddFailureWithoutDeviceAndEventsNone(t *testing.T) {
	k := newKubeEnv(t)
	k.kube.nads["default/fast-net"] = "example.com/other" // the pod has none of it
	err := k.p.Add(k.args())
	if err == nil {
		t.Fatal("ADD without a device succeeded")
	}
	evs, _ := k.kube.recorded()
	if len(evs) != 1 || !strings.Contains(evs[0].Note, "no device taken") || !strings.Contains(evs[0].Note, errorText(err)) {
		t.Fatalf("events %+v, want one saying no device was taken and why (%v)", evs, err)
	}
	k.conf["events"] = "none"
	if err := k.p.Add(k.args()); err == nil {
		t.Fatal("ADD without a device succeeded")
	}
	if evs, _ := k.kube.recorded(); len(evs) != 1 {
		t.Errorf("\"events\": \"none\" recorded %+v", evs[1:])
	}
}

// "events": "all" records one Normal AddedInterface Event per successful
// ADD, worded like Multus's.
func TestAddSuccessEventWhenConfigured(t *testing.T) {
	k := newKubeEnv(t)
	k.conf["events"] = "all"
	if err := k.p.Add(k.args()); err != nil {
		t.Fatal(err)
	}
	evs, _ := k.kube.recorded()
	if len(evs) != 1 {
		t.Fatalf("events %+v, want one", evs)
	}
	e := evs[0]
	if e.Warning || e.Reason != kube.ReasonAddedInterface || e.Name != "p1" || e.UID != "u1" {
		t.Errorf("event %+v, want a Normal AddedInterface on p1", e)
	}
	if want := "Add net1 ["; !strings.HasPrefix(e.Note, want) ||
		!strings.Contains(e.Note, "from default/fast-net (device 0000:01:02.3)") {
		t.Errorf("note %q, want \"Add net1 [...] from default/fast-net (device 0000:01:02.3)\"", e.Note)
	}
}

// Without a kubeconfig there is no client, hence no Event.
func TestNoEventsWithoutKubeconfig(t *testing.T) {
	k := newKubeEnv(t)
	delete(k.conf, "kubeconfig")
	k.conf["resourceName"] = "example.com/vf"
	k.conf["events"] = "all"
	k.failDelegate()
	if err := k.p.Add(k.args()); err == nil {
		t.Fatal("ADD with a failing delegate succeeded")
	}
	if evs, _ := k.kube.recorded(); len(evs) != 0 || k.kube.made != 0 {
		t.Errorf("events %+v, clients made %d: want none without a kubeconfig", evs, k.kube.made)
	}
}

// An Event write that hangs (ignoring its context) costs ADD at most the
// Event's bound and changes nothing of its outcome; one that fails neither.
func TestEventWriteHangsOrFails(t *testing.T) {
	k := newKubeEnv(t)
	const bound = 300 * time.Millisecond
	k.p.EventTimeout = bound
	hang := make(chan struct{})
	k.kube.eventHang = hang
	t.Cleanup(func() { close(hang) })
	k.failDelegate()
	err := k.p.Add(k.args())
	returned := time.Now()
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrDelegate {
		t.Fatalf("ADD with a hanging Event write: %v, want the delegate's failure", err)
	}
	evs, at := k.kube.recorded()
	if len(evs) != 1 {
		t.Fatalf("events %+v, want one attempted", evs)
	}
	// The bound's timer starts just before the write does, so ADD may return a
	// little less than bound after it began; a hang would never return.
	if took := returned.Sub(at); took < bound/2 || took > bound+5*time.Second {
		t.Errorf("ADD returned %s after the Event write began, want its bound %s", took, bound)
	}

	k.kube.mu.Lock()
	k.kube.eventHang, k.kube.eventErr = nil, errors.New("events.k8s.io is forbidden")
	k.kube.mu.Unlock()
	k.conf["events"] = "all"
	delete(k.conf["delegate"].(map[string]any), "failAdd")
	if err := k.p.Add(k.args()); err != nil {
		t.Fatalf("ADD whose Event write fails: %v", err)
	}
	if evs, _ := k.kube.recorded(); len(evs) != 2 || evs[1].Reason != kube.ReasonAddedInterface {
		t.Errorf("events %+v, want the AddedInterface attempted", evs)
	}
}
