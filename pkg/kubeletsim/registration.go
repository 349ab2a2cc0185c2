package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devplumb/devplumb/pkg/base/resourcename"
)

// dialTimeout bounds connecting to a registering plugin and asking its options,
// as the kubelet bounds its dial.
const dialTimeout = 10 * time.Second

// startRegistration removes every socket in the plugin directory (the
// kubelet's signal to plugins that it restarted) and serves Registration.
func (n *Node) startRegistration() error {
	dir := n.PluginDir()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create device plugin directory: %w", err)
	}
	if err := n.removeSockets(dir); err != nil {
		return err
	}
	lis, err := net.Listen("unix", n.RegistrationSocket())
	if err != nil {
		return fmt.Errorf("listen on registration socket %s: %w", n.RegistrationSocket(), err)
	}
	n.reg = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(n.reg, &registration{n: n})
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_ = n.reg.Serve(lis) // returns at Stop
	}()
	n.log.Info("Serving device plugin registration server", "socket", n.RegistrationSocket())
	return nil
}

// removeSockets deletes socket files only: other files in the directory are
// not ours to delete.
func (n *Node) removeSockets(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read device plugin directory: %w", err)
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove stale socket %s: %w", p, err)
		}
		n.log.Info("Removed stale socket so its plugin re-registers", "socket", p)
	}
	return nil
}

type registration struct {
	pluginapi.UnimplementedRegistrationServer
	n *Node
}

// Register validates like the kubelet, connects to the plugin and replaces any
// endpoint registered before for the same resource.
func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	n := r.n
	res := req.GetResourceName()
	n.log.Info("Got registration request from device plugin", "resource", res,
		"endpoint", req.GetEndpoint(), "version", req.GetVersion())
	err := validateVersion(req.GetVersion())
	if err == nil {
		err = resourcename.Validate(res)
	}
	if err == nil {
		err = validateEndpoint(req.GetEndpoint())
	}
	if err != nil {
		n.log.Error("Bad registration request from device plugin", "resource", res, "err", err)
		return &pluginapi.Empty{}, err
	}
	ep, err := n.connect(ctx, res, filepath.Join(n.PluginDir(), req.GetEndpoint()))
	if err != nil {
		n.log.Error("Failed to connect to device plugin", "resource", res, "err", err)
		return &pluginapi.Empty{}, err
	}
	n.mu.Lock()
	if n.ctx.Err() != nil { // Stop began while we dialed: do not start what Stop will not wait for
		n.mu.Unlock()
		ep.stop()
		return &pluginapi.Empty{}, fmt.Errorf("kubelet is stopping")
	}
	old := n.endpoints[res]
	n.endpoints[res] = ep
	n.cancelExpiryLocked(res)
	n.wg.Add(1)
	n.notifyLocked()
	n.mu.Unlock()
	if old != nil {
		n.log.Info("Replacing device plugin endpoint", "resource", res, "old", old.socket, "new", ep.socket)
		old.stop()
	}
	go func() {
		defer n.wg.Done()
		n.watch(ep)
	}()
	n.log.Info("Registered device plugin", "resource", res, "socket", ep.socket,
		"preStartRequired", ep.opts.GetPreStartRequired(),
		"getPreferredAllocationAvailable", ep.opts.GetGetPreferredAllocationAvailable())
	return &pluginapi.Empty{}, nil
}

// endpoint is one registered plugin connection.
type endpoint struct {
	resource string
	socket   string
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	opts     *pluginapi.DevicePluginOptions
	ctx      context.Context
	cancel   context.CancelFunc
	listed   bool // a ListAndWatch answer arrived; guarded by Node.mu
}

func (e *endpoint) stop() {
	e.cancel()
	e.conn.Close()
}

func (n *Node) connect(ctx context.Context, res, socket string) (*endpoint, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("failed to dial device plugin with socketPath %s: %w", socket, err)
	}
	client := pluginapi.NewDevicePluginClient(conn)
	octx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	// WaitForReady: the plugin may start serving a moment after it registers.
	opts, err := client.GetDevicePluginOptions(octx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to get device plugin options from %s: %w", socket, err)
	}
	ectx, ecancel := context.WithCancel(n.ctx)
	return &endpoint{resource: res, socket: socket, conn: conn, client: client, opts: opts,
		ctx: ectx, cancel: ecancel}, nil
}
