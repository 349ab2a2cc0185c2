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
	// The kubelet never removes kubelet.sock when it stops (killed or not): the
	// old file stays until the next start's cleanup, and plugins see it removed
	// and created again only then.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
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
// not ours to delete. The kubelet removes them in directory order, which no
// plugin can count on; the emulator takes the order that is hardest on
// plugins: their sockets first, the old kubelet.sock last, so a plugin that
// reacts to its socket's removal at once still finds the dead kubelet.sock
// and sees its removal and re-creation after that.
func (n *Node) removeSockets(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read device plugin directory: %w", err)
	}
	var socks []string
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 && e.Name() != "kubelet.sock" {
			socks = append(socks, filepath.Join(dir, e.Name()))
		}
	}
	for _, p := range append(socks, n.RegistrationSocket()) {
		if err := os.Remove(p); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
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

// Register validates like the kubelet, connects to the plugin and makes it
// the resource's endpoint, unless the kubelet already holds a connection to
// that socket (see admitLocked).
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
	old, err := n.admitLocked(ep)
	n.mu.Unlock()
	if err != nil {
		ep.stop()
		n.log.Error("Error connecting to device plugin client", "resource", res, "err", err)
		return &pluginapi.Empty{}, err
	}
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

// errAlreadyConnected is the kubelet's answer (1.37: devicemanager
// PluginConnected) to a registration of a socket it holds a connection to.
const errAlreadyConnected = "device plugin already connected: %s"

// admitLocked makes ep the endpoint of its resource and returns the one it
// replaces (the caller stops it); n.mu must be held. On success the caller
// owes n.wg.Done for ep's watch.
//
// A socket the node holds a connection to is refused, as kubelet 1.37 does,
// with the kubelet's consequence: its handler then forgets every client of
// that socket, the live one too (connectClient's deregisterClient), so when
// the live one's stream ends nothing disconnects it. Its endpoint stays
// registered with its devices, Allocate dials its socket even when it is
// gone, and the socket is refused until the kubelet restarts. Kubelets up to
// 1.36 replaced the endpoint instead; a plugin that works with 1.37 works
// with them.
func (n *Node) admitLocked(ep *endpoint) (*endpoint, error) {
	if n.ctx.Err() != nil { // Stop began while we dialed: do not start what Stop will not wait for
		return nil, fmt.Errorf("kubelet is stopping")
	}
	key := sockKey{ep.resource, ep.socket}
	if live := n.sockets[key]; live != nil {
		live.tracked = false
		return nil, fmt.Errorf(errAlreadyConnected, ep.socket)
	}
	old := n.endpoints[ep.resource]
	if old != nil {
		delete(n.sockets, sockKey{old.resource, old.socket})
	}
	ep.tracked = true
	n.sockets[key] = ep
	n.endpoints[ep.resource] = ep
	n.cancelExpiryLocked(ep.resource)
	n.wg.Add(1)
	n.notifyLocked()
	return old, nil
}

// sockKey names one connection of the kubelet: a resource's plugin socket
// (the kubelet's endpointStore key).
type sockKey struct{ resource, socket string }

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
	// tracked: the kubelet's client list holds this connection, so the end of
	// its stream disconnects it; a refused registration of its socket clears
	// it (see admitLocked). Guarded by Node.mu.
	tracked bool
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
