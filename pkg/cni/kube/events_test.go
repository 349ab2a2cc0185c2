package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// eventServer takes events.k8s.io/v1 Event creates; the first `fail` get 503,
// and `exists` answers AlreadyExists (a retried create the server had done).
type eventServer struct {
	mu     sync.Mutex
	paths  []string
	events []eventsv1.Event
	fail   int
	exists bool
}

func (s *eventServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paths = append(s.paths, r.Method+" "+r.URL.Path)
	var ev eventsv1.Event
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.events = append(s.events, ev)
	switch {
	case s.fail > 0:
		s.fail--
		writeStatus(w, apierrors.NewServiceUnavailable("etcd is busy"))
	case s.exists:
		writeStatus(w, apierrors.NewAlreadyExists(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, ev.Name))
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(ev)
	}
}

func eventClient(t *testing.T, s *eventServer) *Client {
	t.Helper()
	return serverClient(t, s, 5*time.Second)
}

// One POST to events.k8s.io/v1 in the pod's namespace, with what the API
// server requires of an Event created there and kubectl describe selects by;
// a 503 is retried, AlreadyExists counts as written.
func TestRecordPodEvent(t *testing.T) {
	s := &eventServer{fail: 1}
	c := eventClient(t, s)
	e := PodEvent{Namespace: "ns1", Name: "p1", UID: "u1", Warning: true, Reason: ReasonAttachmentFailed, Note: "network n1: boom"}
	if err := c.RecordPodEvent(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if len(s.events) != 2 || s.paths[1] != "POST /apis/events.k8s.io/v1/namespaces/ns1/events" {
		t.Fatalf("requests %v, want a 503 then one POST to events.k8s.io/v1 in ns1", s.paths)
	}
	ev := s.events[1]
	r := ev.Regarding
	if r.Kind != "Pod" || r.APIVersion != "v1" || r.Namespace != "ns1" || r.Name != "p1" || r.UID != "u1" {
		t.Errorf("regarding %+v, want the pod ns1/p1 with its UID", r)
	}
	if ev.Type != "Warning" || ev.Reason != ReasonAttachmentFailed || ev.Note != e.Note || ev.Action == "" ||
		ev.ReportingController != "devplumb" || ev.ReportingInstance == "" || ev.EventTime.IsZero() ||
		!strings.HasPrefix(ev.Name, "p1.") || ev.Namespace != "ns1" {
		t.Errorf("event %+v", ev)
	}
	if ev.DeprecatedCount != 0 || !ev.DeprecatedFirstTimestamp.IsZero() || ev.DeprecatedSource.Component != "" {
		t.Errorf("event sets core/v1 fields the API server refuses in events.k8s.io/v1: %+v", ev)
	}
	s.exists = true
	if err := c.RecordPodEvent(context.Background(), e); err != nil {
		t.Errorf("AlreadyExists: %v, want success", err)
	}
}

// A forbidden create (no RBAC for events) fails at once and says what.
func TestRecordPodEventForbidden(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, apierrors.NewForbidden(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "", nil))
	}))
	t.Cleanup(hs.Close)
	c, err := newFromConfig(&rest.Config{Host: hs.URL}, 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.RecordPodEvent(context.Background(), PodEvent{Namespace: "ns1", Name: "p1", Reason: ReasonAddedInterface})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "create Event AddedInterface on pod ns1/p1") {
		t.Fatalf("err %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a forbidden create took %s: it must not be retried", took)
	}
}

// Notes and instances over the API server's limits are cut on a rune boundary.
func TestEventLimits(t *testing.T) {
	long := strings.Repeat("é", 600) // 1200 bytes
	ev := newEvent(PodEvent{Name: "p", Note: long}, time.Now(), strings.Repeat("n", 200))
	if len(ev.Note) > noteLimit || !utf8.ValidString(ev.Note) || !strings.HasSuffix(ev.Note, "...") {
		t.Errorf("note of %d bytes (valid UTF-8 %v)", len(ev.Note), utf8.ValidString(ev.Note))
	}
	if len(ev.ReportingInstance) > instanceLimit {
		t.Errorf("reportingInstance of %d bytes", len(ev.ReportingInstance))
	}
	if ev.Type != "Normal" {
		t.Errorf("type %q, want Normal", ev.Type)
	}
	if short := newEvent(PodEvent{Name: "p", Note: "short"}, time.Now(), "n"); short.Note != "short" {
		t.Errorf("short note changed: %q", short.Note)
	}
}
