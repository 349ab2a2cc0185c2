package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestAttachmentFailedEvent: when devplumb's ADD fails on the real node (here its delegate
// refuses an address), `kubectl describe pod` shows why: devplumb's Warning
// AttachmentFailed Event on the pod names the network, the device the kubelet gave and the
// delegate's error, written with the credential the installer wrote (under node-policy.yaml).
// The failed ADDs leave no record or CNI device-info file once the pod is gone.
func TestAttachmentFailedEvent(t *testing.T) {
	deployed(t)
	bad := strings.Replace(string(hostDeviceConflist("devplumb-events", "example.com/hostdev", "192.0.2.40/24")),
		"192.0.2.40/24", "192.0.2.400/24", 1)
	useConflist(t, "devplumb-events", []byte(bad))

	pod := createPod(t, "events", map[string]string{"example.com/hostdev": "1"})
	var ev *eventsv1.Event
	waitFor(t, "devplumb's AttachmentFailed Event on the pod", func(c context.Context) error {
		var err error
		ev, err = devplumbEvent(c, pod.Namespace, pod.Name)
		return err
	})
	if ev.Type != "Warning" || ev.Regarding.UID != pod.UID {
		t.Errorf("Event %s %s regarding %+v, want a Warning on pod UID %s", ev.Type, ev.Reason, ev.Regarding, pod.UID)
	}
	for _, want := range []string{"devplumb-events", "ens2f", "192.0.2.400"} {
		if !strings.Contains(ev.Note, want) {
			t.Errorf("Event note %q does not name %s", ev.Note, want)
		}
	}

	deletePod(t, pod)
	for _, dir := range []string{"/run/k8s.cni.cncf.io/devinfo/cni", "/var/lib/cni/devplumb/attachments"} {
		if left := testenv.Files(t, nd.HostPath(dir)); len(left) > 0 {
			t.Errorf("left in %s after the pod was deleted: %v", dir, left)
		}
	}
}

// devplumbEvent is devplumb's AttachmentFailed Event on the pod, or an error saying what
// Events the pod has.
func devplumbEvent(c context.Context, namespace, pod string) (*eventsv1.Event, error) {
	evs, err := nd.Client.EventsV1().Events(namespace).List(c, metav1.ListOptions{FieldSelector: "regarding.name=" + pod})
	if err != nil {
		return nil, err
	}
	var seen []string
	for i, e := range evs.Items {
		if e.ReportingController == kube.ReportingController && e.Reason == kube.ReasonAttachmentFailed {
			return &evs.Items[i], nil
		}
		seen = append(seen, e.ReportingController+"/"+e.Reason)
	}
	return nil, fmt.Errorf("no Event of devplumb yet; the pod's Events: %v", seen)
}
