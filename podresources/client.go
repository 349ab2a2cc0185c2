// Package podresources is a client of the kubelet PodResources API v1
// (k8s.io/kubelet/pkg/apis/podresources/v1) on its unix socket.
//
// Every call has a deadline (default 10s, WithTimeout), retries with jittered
// backoff while the kubelet's shared rate limiter answers ResourceExhausted,
// and Get falls back to List, once and for the rest of the process for that
// socket, when the kubelet has no usable Get (Unimplemented, or the
// "PodResources API Get method disabled" answer of kubelets before 1.34).
//
// Devices returns device IDs in the kubelet's order and never sorts them:
// consumers that sorted IDs handed pods the wrong VF.
//
// podresources is one of devplumb's two public packages (with devinfo): a
// stable API, versioned with the module; podresourcestest serves the same
// API in process for tests. Everything under pkg/ is internal.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the PodResources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DefaultTimeout bounds each call, retries included.
const DefaultTimeout = 10 * time.Second

// maxMsgSize is the receive limit: a node with many pods answers List with
// more than gRPC's 4 MiB default.
const maxMsgSize = 16 << 20

// getDisabledMessage is the kubelet's answer to Get when its feature gate is off.
const getDisabledMessage = "PodResources API Get method disabled"

var (
	// ErrPodNotFound means the kubelet does not know the pod.
	ErrPodNotFound = errors.New("pod not found")
	// ErrUnavailable means the socket is missing or nobody answers on it.
	ErrUnavailable = errors.New("PodResources API unavailable")
)

// getRecheck is how long a client keeps to List after Get failed as
// unusable: a kubelet restarted with the feature gate on (or upgraded)
// answers Get again, and a long-running client must find out.
const getRecheck = time.Minute

type options struct {
	timeout time.Duration
	log     *slog.Logger
	limiter *rate.Limiter
	shared  bool
}

// The kubelet's PodResources rate limit (its DefaultQPS and
// DefaultBurstTokens): one limiter for all of its clients.
const (
	KubeletQPS   = 100
	KubeletBurst = 10
)

// SharedQPS and SharedBurst are a client's own limit within the kubelet's,
// for a client that serves a node's burst of pods: a margin below it, since
// two calls released in turn may reach the kubelet closer together.
const (
	SharedQPS   = KubeletQPS * 9 / 10
	SharedBurst = KubeletBurst / 2
)

// WithRateLimit makes the client wait for a token before each call, qps a
// second after a burst of burst: a client shared by many calls (the node
// agent's) then stays within the kubelet's limit on its own instead of being
// refused and retrying. Other clients of the kubelet share its limit, so a
// refusal is still retried.
func WithRateLimit(qps float64, burst int) Option {
	return func(o *options) { o.limiter = rate.NewLimiter(rate.Limit(qps), burst) }
}

// Option configures New.
type Option func(*options)

// WithTimeout sets the deadline of each call (retries included); d <= 0 keeps the default.
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// WithLogger sets where the client logs its fallback and retries (default: slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// Client talks to one kubelet. It is safe for concurrent use.
type Client struct {
	socket string
	opts   options
	conn   *grpc.ClientConn
	api    v1.PodResourcesListerClient

	mu        sync.Mutex
	listUntil time.Time        // until then, Get goes straight to List
	now       func() time.Time // the clock (tests set it)
	rounds    rounds           // WithSharedCalls
}

// New checks that socket exists and is a socket and prepares a connection;
// the first call connects. socket "" means DefaultSocket.
func New(socket string, opts ...Option) (*Client, error) {
	o := options{timeout: DefaultTimeout, log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	if socket == "" {
		socket = DefaultSocket
	}
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, fmt.Errorf("PodResources socket %s: %w", socket, err)
	}
	if err := checkSocket(abs); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)))
	if err != nil {
		return nil, fmt.Errorf("PodResources socket %s: %w", abs, err)
	}
	return &Client{socket: abs, opts: o, conn: conn, api: v1.NewPodResourcesListerClient(conn), now: time.Now}, nil
}

func checkSocket(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("PodResources socket %s not found: is the kubelet running and the path mounted?: %w", path, ErrUnavailable)
	}
	if err != nil {
		return fmt.Errorf("PodResources socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("PodResources socket %s is not a unix socket: %w", path, ErrUnavailable)
	}
	return nil
}

// Socket is the absolute path of the socket the client uses.
func (c *Client) Socket() string { return c.socket }

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Get returns the resources of one pod: through Get, or through List when the
// kubelet has no usable Get. A pod the kubelet does not know is ErrPodNotFound.
func (c *Client) Get(ctx context.Context, namespace, name string) (*v1.PodResources, error) {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	if c.opts.shared {
		return c.sharedGet(ctx, namespace, name)
	}
	return c.ownGet(ctx, namespace, name)
}

// ownGet is one Get (or List, when Get is unusable) of its own.
func (c *Client) ownGet(ctx context.Context, namespace, name string) (*v1.PodResources, error) {
	if !c.listOnly() {
		p, err := c.get(ctx, namespace, name)
		if !getIsUnusable(err) {
			return p, err
		}
		c.useListFor(getRecheck)
		c.opts.log.Info("PodResources Get unusable, using List for a while",
			"socket", c.socket, "recheck", getRecheck, "reason", status.Convert(err).Message())
	}
	return c.findInList(ctx, namespace, name)
}

// listOnly reports whether Get failed as unusable within getRecheck. It is
// this client's memory, not the process's: another client (of another
// kubelet behind the same path, after a restart) asks Get itself.
func (c *Client) listOnly() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now().Before(c.listUntil)
}

func (c *Client) useListFor(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listUntil = c.now().Add(d)
}

func (c *Client) get(ctx context.Context, namespace, name string) (*v1.PodResources, error) {
	var resp *v1.GetPodResourcesResponse
	err := c.retry(ctx, "Get", func(ctx context.Context) (err error) {
		resp, err = c.api.Get(ctx, &v1.GetPodResourcesRequest{PodNamespace: namespace, PodName: name})
		return err
	})
	if isNotFound(err) {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, ErrPodNotFound)
	}
	if err != nil {
		return nil, err
	}
	return resp.GetPodResources(), nil
}

func (c *Client) findInList(ctx context.Context, namespace, name string) (*v1.PodResources, error) {
	pods, err := c.list(ctx)
	if err != nil {
		return nil, err
	}
	return inList(pods, namespace, name)
}

// inList finds the pod in a List's answer.
func inList(pods []*v1.PodResources, namespace, name string) (*v1.PodResources, error) {
	for _, p := range pods {
		if p.GetNamespace() == namespace && p.GetName() == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s not in PodResources List: %w", namespace, name, ErrPodNotFound)
}

// List returns the resources of every pod on the node, in the kubelet's order.
func (c *Client) List(ctx context.Context) ([]*v1.PodResources, error) {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	return c.list(ctx)
}

func (c *Client) list(ctx context.Context) ([]*v1.PodResources, error) {
	var resp *v1.ListPodResourcesResponse
	err := c.retry(ctx, "List", func(ctx context.Context) (err error) {
		resp, err = c.api.List(ctx, &v1.ListPodResourcesRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetPodResources(), nil
}

// Devices returns the IDs of resourceName's devices assigned to the pod, in
// the kubelet's order: containers as returned, IDs as returned, never sorted.
// An ID listed for several containers appears once, where first seen.
func (c *Client) Devices(ctx context.Context, namespace, name, resourceName string) ([]string, error) {
	p, err := c.Get(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return DevicesOf(p, resourceName), nil
}

// DevicesOf is Devices on a PodResources already fetched.
func DevicesOf(p *v1.PodResources, resourceName string) []string {
	var ids []string
	seen := map[string]bool{}
	for _, ctr := range p.GetContainers() {
		for _, d := range ctr.GetDevices() {
			if d.GetResourceName() != resourceName {
				continue
			}
			for _, id := range d.GetDeviceIds() {
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
		}
	}
	return ids
}

// DynamicResources returns the pod's DRA claims (with their CDI device names),
// containers in the kubelet's order; a claim shared by several containers
// appears once, where first seen.
func (c *Client) DynamicResources(ctx context.Context, namespace, name string) ([]*v1.DynamicResource, error) {
	p, err := c.Get(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	var out []*v1.DynamicResource
	seen := map[string]bool{}
	for _, ctr := range p.GetContainers() {
		for _, dr := range ctr.GetDynamicResources() {
			k := dr.GetClaimNamespace() + "/" + dr.GetClaimName()
			if !seen[k] {
				seen[k] = true
				out = append(out, dr)
			}
		}
	}
	return out, nil
}

// Allocatable returns what the node can allocate (GetAllocatableResources).
func (c *Client) Allocatable(ctx context.Context) (*v1.AllocatableResourcesResponse, error) {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	var resp *v1.AllocatableResourcesResponse
	err := c.retry(ctx, "GetAllocatableResources", func(ctx context.Context) (err error) {
		resp, err = c.api.GetAllocatableResources(ctx, &v1.AllocatableResourcesRequest{})
		return err
	})
	return resp, err
}

// deadline applies the client's timeout unless ctx already ends sooner.
func (c *Client) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opts.timeout)
}

func getIsUnusable(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	return st.Code() == codes.Unimplemented || strings.Contains(st.Message(), getDisabledMessage)
}

// isNotFound recognizes the kubelet's "pod X in namespace Y not found" (sent
// as code Unknown) and a proper NotFound code.
func isNotFound(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	return st.Code() == codes.NotFound ||
		(st.Code() == codes.Unknown && strings.HasSuffix(st.Message(), " not found"))
}
