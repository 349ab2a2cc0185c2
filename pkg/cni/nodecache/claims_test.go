package nodecache

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// A pod event that comes while its claim is being read (a pod made with its
// nodeName before the claim was reserved for it, then changed) reads the claim
// again after that read: the first read may have seen it before the
// reservation, and the cache would hold it unreserved, a miss for every ADD.
func TestClaimWantedWhileReadIsReadAgain(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "net", ResourceClaimName: ptr("c")}}}}
	var reads atomic.Int32
	inFirst, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claim := resourcev1.ResourceClaim{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
		if reads.Add(1) == 1 { // read before the scheduler's reservation, answered after it
			close(inFirst)
			<-release
		} else {
			claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "u1"}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&claim)
	}))
	defer srv.Close()
	s := testClaimStore(t, srv.URL)
	s.want(pod)
	<-inFirst
	s.want(pod) // the pod changed on the node while its claim was read
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		c := s.claims["ns/c"]
		held := c != nil && reservedFor(c, "u1")
		s.mu.Unlock()
		if held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d reads the cache holds claim ns/c as %+v, want it reserved for the pod", reads.Load(), c)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads of the claim, want 2", n)
	}
}

// testClaimStore is an enabled claim store of a cache whose REST client for
// resource.k8s.io/v1 is the server at url's.
func testClaimStore(t *testing.T, url string) *claimStore {
	t.Helper()
	_, res, err := restClients(&rest.Config{Host: url})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &Cache{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: NewMetrics(), resource: res, ctx: ctx, cancel: cancel}
	s := newClaimStore(c)
	s.enabled = true
	go s.read()
	return s
}

func ptr(s string) *string { return &s }
