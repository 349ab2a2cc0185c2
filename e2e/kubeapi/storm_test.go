package kubeapi_test

import (
	"bufio"
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cni/kube"
)

// Bounds of the storm: the other writer patches at least stormPatches times and goes on
// until every devplumb writer has written at least minWrites times while it lasted (so the
// two really overlapped, however the machine schedules them), but never more than
// maxPatches times; each devplumb writer makes at most maxWrites writes.
const (
	stormPatches = 100
	maxPatches   = 5000
	writers      = 4
	minWrites    = 5
	maxWrites    = 2000
)

// TestNetworkStatusConflictStorm: while another writer patches the same pod in a loop (each
// patch a new resourceVersion), several devplumb writers keep rewriting their own entries.
// Every write must succeed, the final list must hold every writer's last entry and the
// other writer's annotation, and the API server must have answered some patches with 409
// Conflict (so the retry path really ran).
func TestNetworkStatusConflictStorm(t *testing.T) {
	c := e2etest.Ctx(t)
	pod, err := srv.CreatePod(c, "default", "storm", nodeName, annotationWith(t, otherEntry))
	e2etest.Must(t, err)
	conflictsBefore := patchConflicts(t)
	done := make(chan struct{})
	final := make([]nadv1.NetworkStatus, writers)
	writes := make([]atomic.Int32, writers)
	errs := make([]error, writers)
	stopped := make([]atomic.Bool, writers) // a writer that failed writes no more
	var wg sync.WaitGroup
	for i := range writers {
		kc := newClient(t, 60*time.Second) // here: t.Fatal only in the test's goroutine
		wg.Add(1)
		go func() {
			defer wg.Done()
			final[i], errs[i] = writeUntil(c, kc, pod.Name, string(pod.UID), i, &writes[i], done)
			stopped[i].Store(true)
		}()
	}
	patches, stormErr := storm(c, pod.Name, func() bool {
		for i := range writes {
			if writes[i].Load() < minWrites && !stopped[i].Load() {
				return false
			}
		}
		return true
	})
	close(done)
	wg.Wait()
	if stormErr != nil {
		t.Fatal(stormErr)
	}
	counts := make([]int32, writers)
	for i, err := range errs {
		counts[i] = writes[i].Load()
		if err != nil {
			t.Errorf("writer %d after %d writes: %v", i, counts[i], err)
		}
	}
	t.Logf("writes per devplumb writer during %d foreign patches: %v", patches, counts)

	got := e2etest.NetworkStatus(t, srv.Client, "default", pod.Name)
	if len(got) != writers+1 || !equalEntry(got[0], otherEntry) {
		t.Fatalf("network-status after the storm has %d entries (want %d, the foreign one first): %+v", len(got), writers+1, got)
	}
	for _, want := range final {
		if !containsEntry(got, want) {
			t.Errorf("writer's last entry %+v lost", want)
		}
	}
	p, err := srv.Client.CoreV1().Pods("default").Get(c, pod.Name, metav1.GetOptions{})
	e2etest.Must(t, err)
	if v := p.Annotations["example.com/storm"]; v != strconv.Itoa(patches) {
		t.Fatalf("other writer's annotation = %q, want %d", v, patches)
	}
	if n := patchConflicts(t) - conflictsBefore; n == 0 {
		t.Fatal("the API server answered no pod PATCH with 409: the storm caused no conflict")
	} else {
		t.Logf("%d patches answered 409 Conflict and retried", n)
	}
}

// writeUntil rewrites writer i's entry (a new MAC each time), counting in writes, until
// done is closed, then returns the last entry written.
func writeUntil(ctx context.Context, c *kube.Client, pod, uid string, i int, writes *atomic.Int32, done <-chan struct{}) (nadv1.NetworkStatus, error) {
	var e nadv1.NetworkStatus
	for n := 0; n < maxWrites; n++ {
		e = pciEntry("default/sriov-a", fmt.Sprintf("net%d", i+1), fmt.Sprintf("0000:18:02.%d", i))
		e.Mac = fmt.Sprintf("02:00:00:00:%02x:%02x", i, n%256)
		if err := c.SetNetworkStatus(ctx, "default", pod, uid, e); err != nil {
			return e, err
		}
		writes.Add(1)
		select {
		case <-done:
			return e, nil
		default:
		}
	}
	return e, nil
}

// storm patches an unrelated annotation of the pod, without preconditions, as a
// controller or a label-adding admin would: at least stormPatches times and until enough
// reports true (at most maxPatches times). It returns how many patches it made.
func storm(ctx context.Context, name string, enough func() bool) (int, error) {
	pods := srv.Client.CoreV1().Pods("default")
	n := 0
	for n < stormPatches || (!enough() && n < maxPatches) {
		n++
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/storm":"%d"}}}`, n)
		if _, err := pods.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return n, fmt.Errorf("storm patch %d: %w", n, err)
		}
	}
	if !enough() {
		return n, fmt.Errorf("devplumb writers made fewer than %d writes each during %d foreign patches", minWrites, n)
	}
	return n, nil
}

// patchConflicts reads the API server's count of pod PATCH requests answered 409.
func patchConflicts(t *testing.T) int {
	t.Helper()
	raw, err := srv.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(e2etest.Ctx(t))
	if err != nil {
		t.Fatalf("read API server metrics: %v", err)
	}
	total := 0
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_request_total{") || !strings.Contains(l, `code="409"`) ||
			!strings.Contains(l, `resource="pods"`) || !strings.Contains(l, `verb="PATCH"`) {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		total += int(v)
	}
	return total
}

func equalEntry(a, b nadv1.NetworkStatus) bool { return reflect.DeepEqual(a, b) }

func containsEntry(list []nadv1.NetworkStatus, e nadv1.NetworkStatus) bool {
	for _, g := range list {
		if g.Name == e.Name && g.Interface == e.Interface && g.Mac == e.Mac {
			return true
		}
	}
	return false
}
