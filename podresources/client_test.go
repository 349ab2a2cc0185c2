package podresources_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/podresources"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

const res = "example.com/vf"

// pod has two containers; IDs are deliberately out of sorted order and one ID
// is repeated in the second container.
func pod(ns, name string) *v1.PodResources {
	return &v1.PodResources{Namespace: ns, Name: name, Containers: []*v1.ContainerResources{
		{Name: "a", Devices: []*v1.ContainerDevices{
			{ResourceName: res, DeviceIds: []string{"0000:03:00.7", "0000:03:00.2"}},
			{ResourceName: "example.com/other", DeviceIds: []string{"x1"}},
		}},
		{Name: "b", Devices: []*v1.ContainerDevices{
			{ResourceName: res, DeviceIds: []string{"0000:03:00.2", "0000:01:00.1"}},
		}, DynamicResources: []*v1.DynamicResource{
			{ClaimName: "c1", ClaimNamespace: ns, ClaimResources: []*v1.ClaimResource{
				{DriverName: "drv", CdiDevices: []*v1.CDIDevice{{Name: "vendor.com/dev=1"}}}}},
		}},
		{Name: "c", DynamicResources: []*v1.DynamicResource{{ClaimName: "c1", ClaimNamespace: ns}}},
	}}
}

func newClient(t *testing.T, socket string, opts ...podresources.Option) *podresources.Client {
	t.Helper()
	c, err := podresources.New(socket, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDevicesKeepKubeletOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []podresourcestest.ServerOption
		get  int // Get calls expected after two lookups
	}{
		{"get", nil, 2},
		{"get-disabled", []podresourcestest.ServerOption{podresourcestest.WithGetDisabled()}, 1},
		{"get-unimplemented", []podresourcestest.ServerOption{podresourcestest.WithGetUnimplemented()}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := podresourcestest.NewServer(t, tc.opts...)
			srv.SetPod(pod("ns", "other"))
			srv.SetPod(pod("ns", "p"))
			c := newClient(t, srv.Socket)
			want := []string{"0000:03:00.7", "0000:03:00.2", "0000:01:00.1"}
			for range 2 {
				got, err := c.Devices(t.Context(), "ns", "p", res)
				if err != nil {
					t.Fatalf("Devices: %v", err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("Devices = %v, want %v", got, want)
				}
			}
			if n := srv.Calls("Get"); n != tc.get {
				t.Errorf("Get calls = %d, want %d (fallback must be remembered)", n, tc.get)
			}
			// The memory is the client's: another client (maybe of a
			// restarted kubelet on the same path) asks Get itself once.
			c2 := newClient(t, srv.Socket)
			for range 2 {
				if _, err := c2.Get(t.Context(), "ns", "p"); err != nil {
					t.Fatal(err)
				}
			}
			if n := srv.Calls("Get"); n != 2*tc.get {
				t.Errorf("Get calls = %d after a second client, want %d", n, 2*tc.get)
			}
		})
	}
}

func TestPodNotFound(t *testing.T) {
	for _, opts := range [][]podresourcestest.ServerOption{nil, {podresourcestest.WithGetDisabled()}} {
		srv := podresourcestest.NewServer(t, opts...)
		srv.SetPod(pod("ns", "p"))
		srv.DeletePod("ns", "p")
		c := newClient(t, srv.Socket)
		_, err := c.Devices(t.Context(), "ns", "p", res)
		if !errors.Is(err, podresources.ErrPodNotFound) {
			t.Fatalf("Devices of a deleted pod: err = %v, want ErrPodNotFound", err)
		}
		if !strings.Contains(err.Error(), "ns/p") {
			t.Errorf("error %q does not name the pod", err)
		}
	}
}

func TestNoDevicesOfResource(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	srv.SetPod(pod("ns", "p"))
	got, err := newClient(t, srv.Socket).Devices(t.Context(), "ns", "p", "example.com/none")
	if err != nil || len(got) != 0 {
		t.Fatalf("Devices = %v, %v; want none, nil", got, err)
	}
}

func TestDynamicResources(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	srv.SetPod(pod("ns", "p"))
	drs, err := newClient(t, srv.Socket).DynamicResources(t.Context(), "ns", "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(drs) != 1 || drs[0].GetClaimName() != "c1" ||
		drs[0].GetClaimResources()[0].GetCdiDevices()[0].GetName() != "vendor.com/dev=1" {
		t.Fatalf("DynamicResources = %v", drs)
	}
}

func TestAllocatable(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	srv.SetAllocatable(&v1.AllocatableResourcesResponse{Devices: []*v1.ContainerDevices{
		{ResourceName: res, DeviceIds: []string{"d1"}, Topology: &v1.TopologyInfo{Nodes: []*v1.NUMANode{{ID: 1}}}},
	}})
	a, err := newClient(t, srv.Socket).Allocatable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(a.GetDevices()) != 1 || a.GetDevices()[0].GetTopology().GetNodes()[0].GetID() != 1 {
		t.Fatalf("Allocatable = %v", a)
	}
}

func TestMissingSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x", "kubelet.sock")
	_, err := podresources.New(path)
	want := "PodResources socket " + path + " not found: is the kubelet running and the path mounted?"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, podresources.ErrUnavailable) {
		t.Fatalf("New(missing) = %v, want %q", err, want)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := podresources.New(file); err == nil || !strings.Contains(err.Error(), "not a unix socket") {
		t.Fatalf("New(regular file) = %v", err)
	}
}

func TestRefusedSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false) // leave a dead socket file, as a crashed kubelet does
	l.Close()
	c := newClient(t, path, podresources.WithTimeout(2*time.Second))
	_, err = c.Get(t.Context(), "ns", "p")
	if !errors.Is(err, podresources.ErrUnavailable) || !strings.Contains(err.Error(), "is the kubelet running") {
		t.Fatalf("Get on dead socket = %v", err)
	}
}

// The server's limiter answers ResourceExhausted like the kubelet's.
func TestRateLimiterRejects(t *testing.T) {
	srv := podresourcestest.NewServer(t, podresourcestest.WithRateLimit(1, 2))
	conn, err := grpc.NewClient("unix://"+srv.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := v1.NewPodResourcesListerClient(conn)
	rejected := 0
	for range 6 {
		_, err := raw.List(t.Context(), &v1.ListPodResourcesRequest{})
		if status.Code(err) == codes.ResourceExhausted {
			rejected++
			if !strings.Contains(err.Error(), "rejected by rate limit") {
				t.Errorf("rejection text %q", err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if rejected == 0 {
		t.Fatal("6 calls against burst 2 at 1 QPS: none rejected")
	}
}

// Many clients at once exceed the burst; each rides it out within its deadline.
func TestClientRidesOutRateLimit(t *testing.T) {
	srv := podresourcestest.NewServer(t, podresourcestest.WithRateLimit(40, 1))
	srv.SetPod(pod("ns", "p"))
	const n = 30
	devicesAtOnce(t, n, "client under rate limit", func() (*podresources.Client, func(), error) {
		c, err := podresources.New(srv.Socket)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	})
	if calls := srv.Calls("Get"); calls <= n {
		t.Errorf("%d Get calls for %d clients: the limiter never refused, test proves nothing", calls, n)
	}
}

// When the limiter never lets a call through, the client stops at its deadline
// and says why.
func TestRateLimitedPastDeadline(t *testing.T) {
	srv := podresourcestest.NewServer(t, podresourcestest.WithRateLimit(1e-6, 1))
	srv.SetPod(pod("ns", "p"))
	// 2 s: under qemu-user (images/arm64) one refused call took more than 300 ms.
	c := newClient(t, srv.Socket, podresources.WithTimeout(2*time.Second))
	if _, err := c.Get(t.Context(), "ns", "p"); err != nil {
		t.Fatalf("first call (burst token): %v", err)
	}
	_, err := c.Get(t.Context(), "ns", "p")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "still rate limited") {
		t.Fatalf("Get past deadline = %v", err)
	}
	if srv.Calls("Get") < 3 {
		t.Errorf("only %d Get calls: the client did not retry", srv.Calls("Get"))
	}
}

func TestDevicesOf(t *testing.T) {
	if got := podresources.DevicesOf(nil, res); got != nil {
		t.Fatalf("DevicesOf(nil) = %v", got)
	}
}

func TestLongTestNameStillGetsASocket(t *testing.T) {
	t.Run(strings.Repeat("very-long-subtest-name-", 6), func(t *testing.T) {
		srv := podresourcestest.NewServer(t)
		srv.SetPod(pod("ns", "p"))
		if _, err := newClient(t, srv.Socket).Get(t.Context(), "ns", "p"); err != nil {
			t.Fatal(err)
		}
	})
}

// An unusable Get is remembered for GetRecheck only: after it, the client
// asks Get again (the kubelet may have been restarted with it enabled).
func TestGetFallbackIsNotForever(t *testing.T) {
	srv := podresourcestest.NewServer(t, podresourcestest.WithGetDisabled())
	srv.SetPod(pod("ns", "p"))
	c := newClient(t, srv.Socket)
	now := time.Unix(1000, 0)
	podresources.SetClock(c, func() time.Time { return now })
	lookup := func() {
		t.Helper()
		if _, err := c.Get(t.Context(), "ns", "p"); err != nil {
			t.Fatal(err)
		}
	}
	lookup()
	now = now.Add(podresources.GetRecheck - time.Second)
	lookup()
	if n := srv.Calls("Get"); n != 1 {
		t.Fatalf("Get calls within the recheck period = %d, want 1", n)
	}
	now = now.Add(2 * time.Second)
	lookup()
	if n := srv.Calls("Get"); n != 2 {
		t.Errorf("Get calls after the recheck period = %d, want 2", n)
	}
}

// One client shared by a burst (the node agent's, WithSharedCalls) makes
// one call at a time: 110 Gets at once, at the kubelet's default limit, cost
// it a few calls, all within its burst, so none is refused; the same burst
// of plain Gets is refused.
func TestSharedClientKeepsWithinKubeletLimit(t *testing.T) {
	for _, shared := range []bool{true, false} {
		srv := podresourcestest.NewServer(t, podresourcestest.WithRateLimit(podresources.KubeletQPS, podresources.KubeletBurst))
		srv.SetPod(pod("ns", "p"))
		opts := []podresources.Option{}
		if shared {
			opts = append(opts, podresources.WithSharedCalls())
		}
		c := newClient(t, srv.Socket, opts...)
		const n = 110
		devicesAtOnce(t, n, fmt.Sprintf("Get in a burst (shared %v)", shared), func() (*podresources.Client, func(), error) {
			return c, func() {}, nil
		})
		calls := srv.Calls("Get") + srv.Calls("List")
		t.Logf("shared %v: %d Get and %d List calls for %d Gets", shared, srv.Calls("Get"), srv.Calls("List"), n)
		if shared && calls > podresources.KubeletBurst {
			t.Errorf("%d calls for %d shared Gets: want at most the kubelet's burst (%d), so none refused", calls, n, podresources.KubeletBurst)
		}
		if !shared && calls <= n {
			t.Errorf("%d calls for %d plain Gets: the kubelet's limiter refused none, the test proves nothing", calls, n)
		}
	}
}

// devicesAtOnce asks n times at once for pod ns/p's devices (3 of res), each
// time with the client client gives (and done with it after), and fails the
// test on any error or wrong answer.
func devicesAtOnce(t *testing.T, n int, what string, client func() (*podresources.Client, func(), error)) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			c, done, err := client()
			if err != nil {
				errs <- err
				return
			}
			defer done()
			ids, err := c.Devices(context.Background(), "ns", "p", res)
			if err == nil && len(ids) != 3 {
				err = fmt.Errorf("got %v", ids)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}
