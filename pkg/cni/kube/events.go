package kube

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// Events on the pod (kubectl describe pod lists them).
//
// devplumb writes one events.k8s.io/v1 Event with one POST, not through
// client-go's tools/events or tools/record recorders. Those queue the Event
// on a broadcaster whose goroutine writes it later, so a process that exits
// right after ADD (devplumb does, once per CNI call) must flush them with
// Shutdown, whose wait is not bounded by a context; they also aggregate and
// rate-limit across calls, which a process living one call never sees. And
// they write through the typed clientsets, which link every API group's
// scheme (see dra.go: that doubled the binary). One direct create, within
// the caller's context, is what a one-shot CNI call can bound.

// Event reasons, as Multus names its ("AddedInterface") so that a user of
// Multus reads devplumb's alike.
const (
	ReasonAddedInterface   = "AddedInterface"
	ReasonAttachmentFailed = "AttachmentFailed"
)

// ReportingController names devplumb in every Event it writes.
const ReportingController = "devplumb"

// eventAction is what devplumb was doing (events.k8s.io/v1 requires one).
const eventAction = "AttachNetwork"

// The API server's limits on an events.k8s.io/v1 Event (ValidateEventCreate).
const (
	noteLimit     = 1024
	instanceLimit = 128
)

// PodEvent is one Event regarding a pod.
type PodEvent struct {
	Namespace, Name, UID string
	Warning              bool   // type Warning, else Normal
	Reason               string // ReasonAddedInterface or ReasonAttachmentFailed
	Note                 string // cut to the API server's 1024 bytes
}

var eventsTypes = schemeOf(eventsv1.AddToScheme)

// eventsClient is a REST client of events.k8s.io/v1 only (made per Event:
// a CNI call writes at most one).
func (c *Client) eventsClient() (rest.Interface, error) {
	scheme, codecs := eventsTypes()
	cfg := rest.CopyConfig(c.cfg)
	cfg.GroupVersion, cfg.APIPath = &eventsv1.SchemeGroupVersion, "/apis"
	cfg.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(scheme, codecs).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: events.k8s.io/v1 client for %s: %w", c.host, err)
	}
	return rc, nil
}

// RecordPodEvent creates one Event regarding the pod, within ctx (and the
// client's bound), retrying what retry retries. A retried create the server
// had already done answers AlreadyExists: that is success.
func (c *Client) RecordPodEvent(ctx context.Context, e PodEvent) error {
	rc, err := c.eventsClient()
	if err != nil {
		return err
	}
	ev := newEvent(e, time.Now(), nodeName())
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err = c.retry(ctx, func(ctx context.Context) (bool, error) {
		err := rc.Post().Namespace(e.Namespace).Resource("events").Body(ev).Do(ctx).Error()
		if apierrors.IsAlreadyExists(err) {
			return true, nil
		}
		return err == nil || !transient(err), err
	})
	if err != nil {
		return fmt.Errorf("kube: create Event %s on pod %s/%s: %w", e.Reason, e.Namespace, e.Name, err)
	}
	return nil
}

// newEvent builds the Event as the API server validates one created
// through events.k8s.io/v1: eventTime, reportingController and
// reportingInstance, action and reason set; the core/v1 fields unset.
func newEvent(e PodEvent, now time.Time, instance string) *eventsv1.Event {
	typ := corev1.EventTypeNormal
	if e.Warning {
		typ = corev1.EventTypeWarning
	}
	return &eventsv1.Event{
		TypeMeta: metav1.TypeMeta{APIVersion: eventsv1.SchemeGroupVersion.String(), Kind: "Event"},
		// The recorders' naming: the object's name and a unique suffix.
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", e.Name, now.UnixNano()), Namespace: e.Namespace},
		EventTime:  metav1.NewMicroTime(now),
		// kubectl describe finds Events by the pod's kind, name, namespace and UID.
		Regarding: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: e.Namespace, Name: e.Name,
			UID: types.UID(e.UID)},
		Type: typ, Reason: e.Reason, Action: eventAction, Note: cut(e.Note, noteLimit),
		ReportingController: ReportingController, ReportingInstance: cut(instance, instanceLimit),
	}
}

// nodeName is the reporting instance: the node devplumb runs on. A CNI
// call is not told the node's name; the kubelet's default node name is the
// host name, lowercased, which is what this is.
func nodeName() string {
	h, err := os.Hostname()
	if h = strings.ToLower(strings.TrimSpace(h)); err != nil || h == "" {
		return "unknown-node"
	}
	return h
}

// cut shortens s to at most n bytes, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "..."
	end := n - len(more)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + more
}
