// Package podresourcestest runs an in-process kubelet PodResources v1 server
// on a unix socket for tests: the kubelet's rate limiter (100 QPS, burst 10)
// is on by default, error texts are the kubelet's, and pods are set directly.
package podresourcestest

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// ServerOption configures NewServer.
type ServerOption func(*podresourcesserver.Config)

// WithGetDisabled makes Get answer like a kubelet with the
// KubeletPodResourcesGet gate off: code Unknown, "PodResources API Get method disabled".
func WithGetDisabled() ServerOption {
	return func(c *podresourcesserver.Config) { c.GetMode = podresourcesserver.GetDisabled }
}

// WithGetUnimplemented makes Get answer codes.Unimplemented (kubelet < 1.27).
func WithGetUnimplemented() ServerOption {
	return func(c *podresourcesserver.Config) { c.GetMode = podresourcesserver.GetUnimplemented }
}

// WithRateLimit sets the shared limiter (the kubelet's is 100 QPS, burst 10).
func WithRateLimit(qps float64, burst int) ServerOption {
	return func(c *podresourcesserver.Config) { c.QPS, c.Burst, c.NoRateLimit = qps, burst, false }
}

// WithoutRateLimit turns the limiter off, e.g. for benchmarks of lookups.
func WithoutRateLimit() ServerOption {
	return func(c *podresourcesserver.Config) { c.NoRateLimit = true }
}

// WithOnCall calls f with each call's method name ("List", "Get", ...) as it
// arrives, before it is answered: a test sees what holds at that moment.
func WithOnCall(f func(method string)) ServerOption {
	return func(c *podresourcesserver.Config) { c.OnCall = f }
}

// Server is a PodResources server whose pods the test sets.
type Server struct {
	// Socket is the unix socket path to give to podresources.New.
	Socket string

	mu          sync.Mutex
	calls       map[string]int
	order       []string // pod keys in the order first set: List answers in it
	pods        map[string]*v1.PodResources
	allocatable *v1.AllocatableResourcesResponse
}

// NewServer starts a server on a socket in t.TempDir() (or a shorter temp dir
// when that path is too long for a socket) and stops it in t.Cleanup.
func NewServer(t testing.TB, opts ...ServerOption) *Server {
	t.Helper()
	var cfg podresourcesserver.Config
	for _, o := range opts {
		o(&cfg)
	}
	s := &Server{
		Socket:      socketPath(t),
		pods:        map[string]*v1.PodResources{},
		allocatable: &v1.AllocatableResourcesResponse{},
		calls:       map[string]int{},
	}
	user := cfg.OnCall
	cfg.OnCall = func(method string) {
		s.count(method)
		if user != nil {
			user(method)
		}
	}
	srv, err := podresourcesserver.Start(s.Socket, s, cfg)
	if err != nil {
		t.Fatalf("start PodResources test server: %v", err)
	}
	t.Cleanup(srv.Stop)
	return s
}

// socketPath is in t.TempDir() unless that path is too long for a unix
// socket (108 bytes on Linux), as with long test names or TMPDIR.
func socketPath(t testing.TB) string {
	p := filepath.Join(t.TempDir(), "kubelet.sock")
	if len(p) < 100 {
		return p
	}
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		t.Fatalf("temp dir for PodResources socket: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "kubelet.sock")
}

func (s *Server) count(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
}

// Calls says how many calls of method ("List", "Get", "GetAllocatableResources")
// arrived, rate-limited ones included.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func key(namespace, name string) string { return namespace + "/" + name }

// SetPod adds or replaces the pod with p's namespace and name (a copy is kept).
func (s *Server) SetPod(p *v1.PodResources) {
	k := key(p.GetNamespace(), p.GetName())
	c := proto.Clone(p).(*v1.PodResources)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pods[k]; !ok {
		s.order = append(s.order, k)
	}
	s.pods[k] = c
}

// DeletePod removes a pod; a missing pod is not an error.
func (s *Server) DeletePod(namespace, name string) {
	k := key(namespace, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pods[k]; !ok {
		return
	}
	delete(s.pods, k)
	for i, o := range s.order {
		if o == k {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

// SetAllocatable sets the GetAllocatableResources answer (a copy is kept).
func (s *Server) SetAllocatable(resp *v1.AllocatableResourcesResponse) {
	c := proto.Clone(resp).(*v1.AllocatableResourcesResponse)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocatable = c
}

// ListPods implements podresourcesserver.Source.
func (s *Server) ListPods() []*v1.PodResources {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*v1.PodResources, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, proto.Clone(s.pods[k]).(*v1.PodResources))
	}
	return out
}

// GetPod implements podresourcesserver.Source.
func (s *Server) GetPod(namespace, name string) (*v1.PodResources, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pods[key(namespace, name)]
	if !ok {
		return nil, false
	}
	return proto.Clone(p).(*v1.PodResources), true
}

// Allocatable implements podresourcesserver.Source.
func (s *Server) Allocatable() *v1.AllocatableResourcesResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return proto.Clone(s.allocatable).(*v1.AllocatableResourcesResponse)
}

// Claim is a DRA claim as the kubelet reports it in a container's
// dynamic_resources: the ResourceClaim's namespace and name and its
// allocated devices (see Device).
func Claim(namespace, name string, devices ...*v1.ClaimResource) *v1.DynamicResource {
	return &v1.DynamicResource{ClaimNamespace: namespace, ClaimName: name, ClaimResources: devices}
}

// Device is one allocated device of a claim: its driver, pool and device
// name in the ResourceSlice, and the CDI device names (vendor.com/class=name)
// the driver's NodePrepareResources answered for it.
func Device(driver, pool, device string, cdiDevices ...string) *v1.ClaimResource {
	cr := &v1.ClaimResource{DriverName: driver, PoolName: pool, DeviceName: device}
	for _, n := range cdiDevices {
		cr.CdiDevices = append(cr.CdiDevices, &v1.CDIDevice{Name: n})
	}
	return cr
}
