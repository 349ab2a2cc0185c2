package podresources_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/podresources"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// bigPods are n pods of one container with per device IDs of 660 bytes each:
// few long IDs make the same bytes as many short ones at a tenth of the
// objects to clone, encode and decode (under -race on a loaded machine, a
// thousand 64-byte IDs per pod took the 16 MiB answer past two minutes).
func bigPods(n, per int) []*v1.PodResources {
	var pods []*v1.PodResources
	for i := range n {
		ids := make([]string, per)
		for j := range ids {
			ids[j] = fmt.Sprintf("%0660d", i*per+j)
		}
		pods = append(pods, &v1.PodResources{Namespace: "ns", Name: fmt.Sprintf("p%d", i), Containers: []*v1.ContainerResources{
			{Name: "c", Devices: []*v1.ContainerDevices{{ResourceName: res, DeviceIds: ids}}}}})
	}
	return pods
}

// The client takes the kubelet's answers up to its 16 MiB limit (the kubelet's
// own server limit): a List of about 12 MiB, as a kubelet whose Get is off
// answers for a node with many devices, arrives whole; one past 16 MiB is a
// clear error, not a hang or a truncated answer.
func TestListUpTo16MiB(t *testing.T) {
	for _, tc := range []struct {
		pods int
		ok   bool
	}{{180, true}, {260, false}} { // 100 IDs of 660 bytes: ~65 KiB per pod
		srv := podresourcestest.NewServer(t, podresourcestest.WithoutRateLimit(), podresourcestest.WithGetDisabled())
		for _, p := range bigPods(tc.pods, 100) {
			srv.SetPod(p)
		}
		// The limit is asserted, not the speed: building and checking 16 MiB under
		// -race on a loaded machine may take longer than the default deadline. The
		// answer too large is no rate limit: it is not retried until the deadline.
		c := newClient(t, srv.Socket, podresources.WithTimeout(2*time.Minute))
		list, err := c.List(t.Context())
		if calls := srv.Calls("List"); calls != 1 {
			t.Errorf("%d pods: %d List calls, want 1: an answer too large was retried as a rate limit", tc.pods, calls)
		}
		if tc.ok && (err != nil || len(list) != tc.pods) {
			t.Fatalf("%d pods (~%d MiB): %d pods, %v", tc.pods, tc.pods*66/1024, len(list), err)
		}
		if !tc.ok && (status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max")) {
			t.Fatalf("%d pods (~%d MiB): want ResourceExhausted naming the size limit, got %d pods, %v", tc.pods, tc.pods*66/1024, len(list), err)
		}
	}
}

// A kubelet that accepts the connection and never answers (a raw socket that
// speaks no HTTP/2, or a server whose handler is stuck) costs a call its
// deadline, never more, and the error says the deadline passed.
func TestHungKubelet(t *testing.T) {
	raw := filepath.Join(t.TempDir(), "hung.sock")
	l, err := net.Listen("unix", raw)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // held open, never read or written
		}
	}()
	stuck := make(chan struct{})
	defer close(stuck)
	srv := podresourcestest.NewServer(t, podresourcestest.WithOnCall(func(string) { <-stuck }))
	srv.SetPod(pod("ns", "p"))
	for _, sock := range []string{raw, srv.Socket} {
		c := newClient(t, sock, podresources.WithTimeout(300*time.Millisecond))
		done := make(chan error, 1)
		go func() { _, err := c.Get(context.Background(), "ns", "p"); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("%s: Get of a hung kubelet = %v, want the deadline's error", sock, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: Get of a hung kubelet still waiting after a minute (deadline 300ms)", sock)
		}
	}
}

// 110 pods (the kubelet's default maxPods) start at once on one node, each
// asking the kubelet for its devices at its default rate limit (100 QPS,
// burst 10): every one gets its answer, riding out the limiter's refusals.
func TestBurstOf110PodsAtDefaultRateLimit(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	for i := range 110 {
		p := pod("ns", fmt.Sprintf("p%d", i))
		srv.SetPod(p)
	}
	errs := make(chan error, 110)
	for i := range 110 {
		go func() {
			c, err := podresources.New(srv.Socket)
			if err == nil {
				defer c.Close()
				_, err = c.Devices(context.Background(), "ns", fmt.Sprintf("p%d", i), res)
			}
			errs <- err
		}()
	}
	for range 110 {
		if err := <-errs; err != nil {
			t.Errorf("a pod's device lookup failed under the burst: %v", err)
		}
	}
	if calls := srv.Calls("Get"); calls <= 110 {
		t.Errorf("%d Get calls for 110 pods: the limiter refused none, the test proves nothing", calls)
	}
}
