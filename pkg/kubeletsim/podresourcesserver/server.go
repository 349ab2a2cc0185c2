// Package podresourcesserver serves the kubelet PodResources v1 API over a unix socket
// the way the kubelet does: one token-bucket rate limiter shared by every
// client (100 QPS, burst 10, ResourceExhausted "rejected by rate limit"), the
// kubelet's error texts for a missing pod and for a disabled Get, and a 16 MiB
// message limit. The data comes from a Source, so the same server backs both
// the in-process test server (podresources/podresourcestest) and nodesim.
package podresourcesserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// The kubelet's defaults (pkg/kubelet/apis/podresources): chosen by the
// kubelet authors from the known consumers, shared by all clients together.
const (
	DefaultQPS   = 100
	DefaultBurst = 10
	// MaxMsgSize matches the 16 MiB limit clients of the kubelet use.
	MaxMsgSize = 16 << 20
)

// ErrRateLimited is what the kubelet answers when its limiter refuses a call.
var ErrRateLimited = status.Error(codes.ResourceExhausted, "rejected by rate limit")

// GetMode says how the server answers Get.
type GetMode int

const (
	// GetEnabled answers Get (KubeletPodResourcesGet: on by default from 1.34,
	// GA and always on from 1.36; every supported kubelet answers so).
	GetEnabled GetMode = iota
	// GetDisabled answers like a kubelet with the feature gate off (1.27-1.33
	// default): code Unknown, "PodResources API Get method disabled".
	GetDisabled
	// GetUnimplemented answers codes.Unimplemented, like a kubelet older than
	// 1.27 that has no Get at all.
	GetUnimplemented
)

// GetDisabledMessage is the kubelet's exact text when the Get gate is off.
const GetDisabledMessage = "PodResources API Get method disabled"

// Source provides the data served. Implementations must be safe for
// concurrent use and return values the server may not modify (clones).
type Source interface {
	ListPods() []*v1.PodResources
	GetPod(namespace, name string) (*v1.PodResources, bool)
	Allocatable() *v1.AllocatableResourcesResponse
}

// Config tunes the server. The zero value is a kubelet with Get enabled and
// the default rate limit.
type Config struct {
	GetMode GetMode
	// QPS and Burst of the shared limiter; zero means the kubelet defaults.
	QPS   float64
	Burst int
	// NoRateLimit turns the limiter off (benchmarks measure lookups, not it).
	NoRateLimit bool
	// OnCall, when set, sees every call's method name ("List", "Get",
	// "GetAllocatableResources") before the limiter: tests count with it.
	OnCall func(method string)
}

// Server is a running PodResources server.
type Server struct {
	grpc   *grpc.Server
	socket string
	done   chan struct{}
}

// Start listens on socket (a stale socket file there is removed, as the
// kubelet does on start) and serves src until Stop.
func Start(socket string, src Source, cfg Config) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o750); err != nil {
		return nil, fmt.Errorf("create PodResources socket directory: %w", err)
	}
	if err := removeStaleSocket(socket); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on PodResources socket %s: %w", socket, err)
	}
	gs := NewGRPCServer(src, cfg)
	s := &Server{grpc: gs, socket: socket, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = gs.Serve(lis) // returns when stopped
	}()
	return s, nil
}

// Socket is the path served.
func (s *Server) Socket() string { return s.socket }

// Stop ends the server; the socket file goes with the listener.
func (s *Server) Stop() {
	s.grpc.Stop()
	<-s.done
}

// NewGRPCServer builds a grpc.Server with the PodResources service and the
// rate limiter registered, for callers that manage their own listener.
func NewGRPCServer(src Source, cfg Config) *grpc.Server {
	var chain []grpc.UnaryServerInterceptor
	if cfg.OnCall != nil {
		chain = append(chain, observe(cfg.OnCall))
	}
	if !cfg.NoRateLimit {
		qps, burst := cfg.QPS, cfg.Burst
		if qps <= 0 {
			qps = DefaultQPS
		}
		if burst <= 0 {
			burst = DefaultBurst
		}
		chain = append(chain, limit(rate.NewLimiter(rate.Limit(qps), burst)))
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMsgSize), grpc.MaxSendMsgSize(MaxMsgSize),
		grpc.ChainUnaryInterceptor(chain...))
	v1.RegisterPodResourcesListerServer(gs, &lister{src: src, mode: cfg.GetMode})
	return gs
}

// limit refuses calls the shared token bucket has no token for, without
// waiting: the kubelet does not queue, it rejects.
func limit(l *rate.Limiter) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if !l.Allow() {
			return nil, ErrRateLimited
		}
		return h(ctx, req)
	}
}

func observe(f func(string)) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		f(path.Base(info.FullMethod))
		return h(ctx, req)
	}
}

type lister struct {
	v1.UnimplementedPodResourcesListerServer
	src  Source
	mode GetMode
}

func (l *lister) List(context.Context, *v1.ListPodResourcesRequest) (*v1.ListPodResourcesResponse, error) {
	return &v1.ListPodResourcesResponse{PodResources: l.src.ListPods()}, nil
}

func (l *lister) Get(_ context.Context, req *v1.GetPodResourcesRequest) (*v1.GetPodResourcesResponse, error) {
	switch l.mode {
	case GetDisabled:
		// The kubelet returns a plain error, which gRPC sends as code Unknown.
		return nil, errors.New(GetDisabledMessage)
	case GetUnimplemented:
		return nil, status.Error(codes.Unimplemented, "method Get not implemented")
	}
	p, ok := l.src.GetPod(req.GetPodNamespace(), req.GetPodName())
	if !ok {
		// Same text and code (Unknown) as the kubelet.
		return nil, fmt.Errorf("pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
	}
	return &v1.GetPodResourcesResponse{PodResources: p}, nil
}

func (l *lister) GetAllocatableResources(context.Context, *v1.AllocatableResourcesRequest) (*v1.AllocatableResourcesResponse, error) {
	return l.src.Allocatable(), nil
}

// removeStaleSocket deletes a socket file left by a previous run; anything
// else at that path is an error rather than something to delete.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket: refusing to replace it", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}
