package kube

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// podServer answers a pod's metadata GET and merge PATCH as the API server does: a
// PATCH whose resourceVersion precondition is stale, or one of the first `conflict`
// PATCHes (another writer changed the pod meanwhile), gets 409 Conflict.
type podServer struct {
	mu       sync.Mutex
	rv       int
	annots   map[string]string
	gets     int
	patches  []map[string]any
	conflict int // PATCHes still to refuse with a conflict
	lost     int // PATCHes still to write and answer with a timeout (504)
	gone     bool
}

func (s *podServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p"))
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.gets++
	case http.MethodPatch:
		var patch map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &patch); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.patches = append(s.patches, patch)
		meta := patch["metadata"].(map[string]any)
		if s.conflict > 0 || meta["resourceVersion"] != s.version() {
			s.conflict--
			s.rv++ // the other writer's change
			writeStatus(w, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("the object has been modified")))
			return
		}
		for k, v := range meta["annotations"].(map[string]any) {
			if v == nil {
				delete(s.annots, k)
			} else {
				s.annots[k] = v.(string)
			}
		}
		s.rv++
		if s.lost > 0 {
			s.lost--
			writeStatus(w, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0))
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: s.version(), Annotations: s.annots}})
}

func (s *podServer) version() string { return strings.Repeat("1", s.rv+1) }

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(err.ErrStatus.Code))
	st := err.ErrStatus
	st.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	_ = json.NewEncoder(w).Encode(st)
}

func podClient(t *testing.T, s *podServer) *Client {
	t.Helper()
	return serverClient(t, s, 30*time.Second)
}

// serverClient is a Client of an httptest server serving h, with the given bound.
func serverClient(t *testing.T, h http.Handler, timeout time.Duration) *Client {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	c, err := newFromConfig(&rest.Config{Host: hs.URL}, timeout, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A PATCH refused for a conflict (the pod changed since it was read) is retried from a
// fresh read, and the write that lands carries the resourceVersion of that read.
func TestConflictIsRetriedFromAFreshRead(t *testing.T) {
	s := &podServer{annots: map[string]string{}, conflict: 2}
	c := podClient(t, s)
	entry := nadv1.NetworkStatus{Name: "ns/fast", Interface: "net1", IPs: []string{"192.0.2.5"}}
	if err := c.SetNetworkStatus(context.Background(), "ns", "p", "u1", entry); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gets != 3 || len(s.patches) != 3 {
		t.Errorf("%d reads and %d patches, want 3 each (two conflicts, then success)", s.gets, len(s.patches))
	}
	if !strings.Contains(s.annots[nadv1.NetworkStatusAnnot], `"ns/fast"`) {
		t.Errorf("annotation after the retries: %q", s.annots[nadv1.NetworkStatusAnnot])
	}
}

// Removing from a pod that is gone is no error: nothing of ours is left to remove.
func TestRemoveFromAGonePod(t *testing.T) {
	s := &podServer{annots: map[string]string{}, gone: true}
	if err := podClient(t, s).RemoveNetworkStatus(context.Background(), "ns", "p", "u1", "ns/fast", "net1"); err != nil {
		t.Errorf("remove from a gone pod: %v", err)
	}
	s.gone = false
	err := podClient(t, s).SetNetworkStatus(context.Background(), "ns", "p", "other-uid", nadv1.NetworkStatus{Name: "n", Interface: "net1"})
	if !errors.Is(err, ErrPodUIDMismatch) {
		t.Errorf("set on a recreated pod: %v, want ErrPodUIDMismatch", err)
	}
}

// A guarded removal asks keep with every read of the pod: a conflict (a later ADD's
// write meanwhile) asks again, and once keep says the entry is another's it is left.
func TestGuardedRemovalAsksAfterEachRead(t *testing.T) {
	s := &podServer{annots: map[string]string{}}
	c := podClient(t, s)
	entry := nadv1.NetworkStatus{Name: "ns/fast", Interface: "net1", IPs: []string{"192.0.2.5"}}
	if err := c.SetNetworkStatus(context.Background(), "ns", "p", "u1", entry); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.conflict, s.patches = 1, nil
	s.mu.Unlock()
	asked := 0
	keep := func() bool { asked++; return asked > 1 } // the later ADD's record appears with the conflict
	if err := c.RemoveNetworkStatusUnless(context.Background(), "ns", "p", "u1", "ns/fast", "net1", keep); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if asked != 2 || len(s.patches) != 1 || !strings.Contains(s.annots[nadv1.NetworkStatusAnnot], `"ns/fast"`) {
		t.Errorf("keep asked %d times, %d patches, annotation %q: want asked twice, the one refused patch, the entry kept",
			asked, len(s.patches), s.annots[nadv1.NetworkStatusAnnot])
	}
}
