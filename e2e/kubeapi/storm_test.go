package kubeapi_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// stormPatches bounds the other writer: it stops after this many patches even if the
// devplumb writers are still busy.
const stormPatches = 3000

// TestNetworkStatusConflictStorm: while another writer patches the same pod in a loop
// (each patch a new resourceVersion), several devplumb writers add their entries at once.
// Every entry must land and the other writer's annotation must survive: no lost update.
func TestNetworkStatusConflictStorm(t *testing.T) {
	pod, err := srv.CreatePod(ctx(t), "default", "storm", node, annotationWith(t, otherEntry))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	stormDone := make(chan int)
	go func() { stormDone <- storm(t, pod.Name, stop) }()

	const writers = 4
	entries := make([]nadv1.NetworkStatus, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		entries[i] = pciEntry("default/sriov-a", fmt.Sprintf("net%d", i+1), fmt.Sprintf("0000:18:02.%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newClient(t, 60*time.Second)
			// Each writer sets its entry several times so the writes interleave with the storm.
			for range 5 {
				if errs[i] = c.SetNetworkStatus(ctx(t), "default", pod.Name, string(pod.UID), entries[i]); errs[i] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	patches := <-stormDone
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	t.Logf("other writer made %d patches", patches)
	if patches == 0 {
		t.Fatal("the other writer never patched the pod: no storm happened")
	}
	wantStatus(t, statusOf(t, "default", pod.Name), append([]nadv1.NetworkStatus{otherEntry}, entriesInOrder(t, entries)...)...)
	got, err := srv.Client.CoreV1().Pods("default").Get(ctx(t), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations["example.com/storm"] != fmt.Sprint(patches) {
		t.Fatalf("other writer's annotation = %q, want %d", got.Annotations["example.com/storm"], patches)
	}
}

// storm patches an unrelated annotation of the pod until stop is closed or stormPatches
// is reached, and returns the number of patches made.
func storm(t *testing.T, name string, stop <-chan struct{}) int {
	pods := srv.Client.CoreV1().Pods("default")
	n := 0
	for n < stormPatches {
		select {
		case <-stop:
			return n
		default:
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/storm":"%d"}}}`, n+1)
		if _, err := pods.Patch(ctx(t), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Errorf("storm patch %d: %v", n+1, err)
			return n
		}
		n++
	}
	return n
}

// entriesInOrder returns entries in the order they appear in the pod's annotation, after
// checking that each is there exactly once: concurrent writers append in any order.
func entriesInOrder(t *testing.T, entries []nadv1.NetworkStatus) []nadv1.NetworkStatus {
	t.Helper()
	var out []nadv1.NetworkStatus
	for _, e := range statusOf(t, "default", "storm") {
		for _, w := range entries {
			if e.Name == w.Name && e.Interface == w.Interface {
				out = append(out, w)
			}
		}
	}
	if len(out) != len(entries) {
		t.Fatalf("%d of %d devplumb entries in the annotation", len(out), len(entries))
	}
	return out
}
