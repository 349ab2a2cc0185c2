package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devplumb/devplumb/pkg/base/resourcename"
)

// NoNUMA marks a device without NUMA affinity.
const NoNUMA = -1

// Device is one device of the resource as the kubelet sees it.
type Device struct {
	ID       string
	Healthy  bool
	NUMANode int // NoNUMA when the device has no NUMA affinity
	// Detail is the plugin's own description of the device (what Allocate needs),
	// kept here so that the plugin needs no second map of its devices; Lookup hands it
	// back. The kubelet never sees it, and a change of it alone is no update.
	Detail any
}

// AllocateFunc builds the response for one container. The IDs are known and
// healthy: the framework has checked them.
type AllocateFunc func(ctx context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error)

// PreStartFunc runs before a container that uses ids starts.
type PreStartFunc func(ctx context.Context, ids []string) error

// Config describes one device plugin.
type Config struct {
	ResourceName string       // e.g. "example.com/netdev"; required
	PluginDir    string       // kubelet device plugin dir; default v1beta1.DevicePluginPath
	Endpoint     string       // socket file name in PluginDir; default from ResourceName
	Allocate     AllocateFunc // required
	PreStart     PreStartFunc // optional; when set the kubelet is asked to call PreStartContainer
	Logger       *slog.Logger // default slog.Default()
	Observer     Observer     // optional: told of registrations and allocations
}

// Server is a device plugin for one resource. Create it with New, feed it
// devices with Update and run it with Run.
type Server struct {
	pluginapi.UnimplementedDevicePluginServer

	cfg         Config
	log         *slog.Logger
	socketPath  string
	kubeletSock string

	mu      sync.Mutex
	devices map[string]Device
	changed chan struct{} // closed and replaced on every device change
	stopped chan struct{} // closed when Run ends: ListAndWatch streams return
	regs    int           // successful registrations, for Registrations

	// Run's goroutine only: servedGen counts the gRPC servers Run started;
	// reg is the registration the kubelet last accepted.
	servedGen   uint64
	reg         registration
	lastKubelet sockID      // of the last accepted registration, kept when reg is reset: a new one is a kubelet restart
	live        atomic.Bool // registered with the kubelet that is there now
	running     atomic.Bool
}

// New checks cfg and returns a server that is not yet serving.
func New(cfg Config) (*Server, error) {
	if err := resourcename.Validate(cfg.ResourceName); err != nil {
		return nil, fmt.Errorf("device plugin: %w", err)
	}
	if cfg.Allocate == nil {
		return nil, fmt.Errorf("device plugin %s: Allocate function is required", cfg.ResourceName)
	}
	if cfg.PluginDir == "" {
		cfg.PluginDir = pluginapi.DevicePluginPath
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = EndpointName(cfg.ResourceName)
	}
	if cfg.Endpoint != filepath.Base(cfg.Endpoint) || cfg.Endpoint == "kubelet.sock" || strings.HasPrefix(cfg.Endpoint, ".") {
		return nil, fmt.Errorf("device plugin %s: endpoint %q must be a plain socket file name other than kubelet.sock", cfg.ResourceName, cfg.Endpoint)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{
		cfg:         cfg,
		log:         cfg.Logger.With("resource", cfg.ResourceName),
		socketPath:  filepath.Join(cfg.PluginDir, cfg.Endpoint),
		kubeletSock: filepath.Join(cfg.PluginDir, "kubelet.sock"),
		devices:     map[string]Device{},
		changed:     make(chan struct{}),
		stopped:     make(chan struct{}),
	}, nil
}

// EndpointName is the default socket file name for a resource.
func EndpointName(resourceName string) string {
	r := strings.NewReplacer("/", "_", ".", "_")
	return r.Replace(resourceName) + ".sock"
}

// SocketPath is the path of the plugin's own socket.
func (s *Server) SocketPath() string { return s.socketPath }

// ResourceName is the resource this server advertises.
func (s *Server) ResourceName() string { return s.cfg.ResourceName }

// Registrations counts successful registrations with the kubelet.
func (s *Server) Registrations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.regs
}

// Update replaces the device list. ListAndWatch streams get the new list when
// anything (membership, health, NUMA node) changed.
func (s *Server) Update(devs []Device) {
	next := make(map[string]Device, len(devs))
	for _, d := range devs {
		next[d.ID] = d
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	same := sameForKubelet(s.devices, next)
	s.devices = next // the details may have changed
	if same {
		return
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// sameForKubelet: a and b hold the same devices with the same health and NUMA node.
func sameForKubelet(a, b map[string]Device) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || w.Healthy != v.Healthy || w.NUMANode != v.NUMANode {
			return false
		}
	}
	return true
}

// Devices returns the current devices sorted by ID.
func (s *Server) Devices() []Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Device, 0, len(s.devices))
	for _, d := range s.devices {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Device) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Lookup returns one device, with its Detail.
func (s *Server) Lookup(id string) (Device, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.devices[id]
	return d, ok
}

// serve removes a stale socket, listens and serves in the background. The
// returned channel gets Serve's result.
func (s *Server) serve() (*grpc.Server, <-chan error, error) {
	if err := os.Remove(s.socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("remove stale socket %s: %w", s.socketPath, err)
	}
	lis, err := net.Listen("unix", s.socketPath)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", s.socketPath, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, s)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	s.log.Info("serving device plugin", "socket", s.socketPath)
	return srv, done, nil
}
