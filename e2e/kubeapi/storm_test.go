package kubeapi_test

import (
	"bufio"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Bounds of the storm: the other writer makes exactly stormPatches patches; each devplumb
// writer makes at most maxWrites writes while it lasts.
const (
	stormPatches = 100
	writers      = 4
	maxWrites    = 2000
)

// TestNetworkStatusConflictStorm: while another writer patches the same pod in a loop (each
// patch a new resourceVersion), several devplumb writers keep rewriting their own entries.
// Every write must succeed, the final list must hold every writer's last entry and the
// other writer's annotation, and the API server must have answered some patches with 409
// Conflict (so the retry path really ran).
func TestNetworkStatusConflictStorm(t *testing.T) {
	pod, err := srv.CreatePod(ctx(t), "default", "storm", nodeName, annotationWith(t, otherEntry))
	if err != nil {
		t.Fatal(err)
	}
	conflictsBefore := patchConflicts(t)
	done := make(chan struct{})
	final := make([]nadv1.NetworkStatus, writers)
	writes := make([]int, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			final[i], writes[i], errs[i] = writeUntil(t, pod.Name, string(pod.UID), i, done)
		}()
	}
	stormErr := storm(t, pod.Name)
	close(done)
	wg.Wait()
	if stormErr != nil {
		t.Fatal(stormErr)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d after %d writes: %v", i, writes[i], err)
		}
	}
	t.Logf("writes per devplumb writer during %d foreign patches: %v", stormPatches, writes)

	got := statusOf(t, "default", pod.Name)
	if len(got) != writers+1 || !equalEntry(got[0], otherEntry) {
		t.Fatalf("network-status after the storm has %d entries (want %d, the foreign one first): %+v", len(got), writers+1, got)
	}
	for _, want := range final {
		if !containsEntry(got, want) {
			t.Errorf("writer's last entry %+v lost", want)
		}
	}
	p, err := srv.Client.CoreV1().Pods("default").Get(ctx(t), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := p.Annotations["example.com/storm"]; v != strconv.Itoa(stormPatches) {
		t.Fatalf("other writer's annotation = %q, want %d", v, stormPatches)
	}
	if c := patchConflicts(t) - conflictsBefore; c == 0 {
		t.Fatal("the API server answered no pod PATCH with 409: the storm caused no conflict")
	} else {
		t.Logf("%d patches answered 409 Conflict and retried", c)
	}
}

// writeUntil rewrites writer i's entry (a new MAC each time) until done is closed, then
// once more, and returns the last entry written.
func writeUntil(t *testing.T, pod, uid string, i int, done <-chan struct{}) (nadv1.NetworkStatus, int, error) {
	c := newClient(t, 60*time.Second)
	var e nadv1.NetworkStatus
	for n := 0; n < maxWrites; n++ {
		e = pciEntry("default/sriov-a", fmt.Sprintf("net%d", i+1), fmt.Sprintf("0000:18:02.%d", i))
		e.Mac = fmt.Sprintf("02:00:00:00:%02x:%02x", i, n%256)
		if err := c.SetNetworkStatus(ctx(t), "default", pod, uid, e); err != nil {
			return e, n, err
		}
		select {
		case <-done:
			return e, n + 1, nil
		default:
		}
	}
	return e, maxWrites, nil
}

// storm patches an unrelated annotation of the pod stormPatches times, without
// preconditions, as a controller or a label-adding admin would.
func storm(t *testing.T, name string) error {
	pods := srv.Client.CoreV1().Pods("default")
	for n := 1; n <= stormPatches; n++ {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/storm":"%d"}}}`, n)
		if _, err := pods.Patch(ctx(t), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("storm patch %d: %w", n, err)
		}
	}
	return nil
}

// patchConflicts reads the API server's count of pod PATCH requests answered 409.
func patchConflicts(t *testing.T) int {
	t.Helper()
	raw, err := srv.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx(t))
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
