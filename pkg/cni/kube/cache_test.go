package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// watchCache is a Cache whose watch lags: it holds the pod at version held
// until a lookup awaits a newer one, which it then has (the server's).
type watchCache struct {
	held    string
	annots  map[string]string // the held pod's
	server  *podServer
	awaited []string // the versions AwaitPod was asked past
}

func (w *watchCache) podAt(rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: rv,
		Annotations: maps.Clone(w.annots)}}
}

func (w *watchCache) Pod(_, _, _ string) (*corev1.Pod, bool) { return w.podAt(w.held), true }
func (w *watchCache) AwaitPod(_, _, _, rv string) (*corev1.Pod, bool) {
	if rv == "" {
		return w.podAt(w.held), true
	}
	w.awaited = append(w.awaited, rv)
	w.server.mu.Lock()
	w.held, w.annots = w.server.version(), maps.Clone(w.server.annots)
	w.server.mu.Unlock()
	return w.podAt(w.held), true
}
func (w *watchCache) ResourceClaim(_, _ string) (*resourcev1.ResourceClaim, bool) { return nil, false }
func (w *watchCache) ResourceSlices(_, _ string) ([]resourcev1.ResourceSlice, bool) {
	return nil, false
}
func (w *watchCache) NAD(_, _ string) (*metav1.PartialObjectMetadata, bool) { return nil, false }

// With a cache, network-status starts from the cached pod and reads nothing;
// a conflict (the cache held an older version) waits for the watch's newer
// pod instead of reading it, and the write that lands carries that version.
func TestCachedPodConflictWaitsForTheWatch(t *testing.T) {
	s := &podServer{annots: map[string]string{}, rv: 1} // the server is at version "11"
	c := podClient(t, s)
	w := &watchCache{held: "1", server: s}
	c.UseCache(w)
	entry := nadv1.NetworkStatus{Name: "ns/fast", Interface: "net1", IPs: []string{"192.0.2.5"}}
	if err := c.SetNetworkStatus(context.Background(), "ns", "p", "u1", entry); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gets != 0 || len(s.patches) != 2 || len(w.awaited) != 1 || w.awaited[0] != "1" {
		t.Errorf("%d reads, %d patches, awaited past %v: want no read, two patches (a conflict, then success), one wait past 1",
			s.gets, len(s.patches), w.awaited)
	}
	if rv := s.patches[1]["metadata"].(map[string]any)["resourceVersion"]; len(s.patches) == 2 && rv != "111" {
		t.Errorf("the landing patch carried resourceVersion %v, want the watch's 111 (the conflict's writer)", rv)
	}
	if !strings.Contains(s.annots[nadv1.NetworkStatusAnnot], `"ns/fast"`) {
		t.Errorf("annotation: %q", s.annots[nadv1.NetworkStatusAnnot])
	}
}

// A patch the API server wrote but answered with a timeout (an overloaded server's 504)
// is retried from the watch's pod past the version it carried, which shows the entry
// written: nothing read, nothing written twice. Without a cache the retry reads the pod again
// and, finding the entry, writes nothing more.
func TestLostAnswerRetriedFromTheWatch(t *testing.T) {
	entry := nadv1.NetworkStatus{Name: "ns/fast", Interface: "net1", IPs: []string{"192.0.2.5"}}
	for _, cached := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache %v", cached), func(t *testing.T) {
			s := &podServer{annots: map[string]string{}, lost: 1}
			c := podClient(t, s)
			w := &watchCache{held: s.version(), server: s}
			if cached {
				c.UseCache(w)
			}
			if err := c.SetNetworkStatus(context.Background(), "ns", "p", "u1", entry); err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			wantGets, wantAwaited := 2, []string(nil) // the first attempt reads too
			if cached {
				wantGets, wantAwaited = 0, []string{"1"}
			}
			if s.gets != wantGets || len(s.patches) != 1 || !slices.Equal(w.awaited, wantAwaited) {
				t.Errorf("%d reads, %d patches, awaited past %v: want %d reads, one patch, awaited past %v",
					s.gets, len(s.patches), w.awaited, wantGets, wantAwaited)
			}
			if !strings.Contains(s.annots[nadv1.NetworkStatusAnnot], `"ns/fast"`) {
				t.Errorf("annotation: %q", s.annots[nadv1.NetworkStatusAnnot])
			}
		})
	}
}

// Only a write whose answer was lost, or that the API server timed out after taking,
// may have landed.
func TestMayHaveLanded(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{apierrors.NewTimeoutError("request did not complete", 0), true},
		{apierrors.NewServiceUnavailable("overloaded"), false},
		{apierrors.NewTooManyRequests("slow down", 1), false},
		{apierrors.NewConflict(gr, "p", errors.New("modified")), false},
		{fmt.Errorf("patch: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), false},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
	} {
		if got := mayHaveLanded(tc.err); got != tc.want {
			t.Errorf("mayHaveLanded(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
