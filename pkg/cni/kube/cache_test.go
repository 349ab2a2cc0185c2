package kube

import (
	"context"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// watchCache is a Cache whose watch lags: it holds the pod at version held
// until a lookup awaits a newer one, which it then has (the server's).
type watchCache struct {
	held    string
	server  *podServer
	awaited []string // the versions AwaitPod was asked past
}

func (w *watchCache) podAt(rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: rv}}
}

func (w *watchCache) Pod(_, _, _ string) (*corev1.Pod, bool) { return w.podAt(w.held), true }
func (w *watchCache) AwaitPod(_, _, _, rv string) (*corev1.Pod, bool) {
	if rv == "" {
		return w.podAt(w.held), true
	}
	w.awaited = append(w.awaited, rv)
	w.server.mu.Lock()
	w.held = w.server.version()
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
