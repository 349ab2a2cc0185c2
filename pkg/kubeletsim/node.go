// Package kubeletsim is a one-node kubelet emulator that device plugins cannot
// tell from the real one. Start serves, under a root directory laid out like
// /var/lib/kubelet:
//
//	ROOT/device-plugins/kubelet.sock   deviceplugin v1beta1 Registration
//	ROOT/pod-resources/kubelet.sock    PodResources v1 (List, Get, GetAllocatableResources), kubelet rate limit
//	ROOT/nodesim/checkpoint.json       pod device assignments, written atomically
//	ROOT/nodesim/control.sock          HTTP+JSON control API used by `nodesim pod ...` (see ControlClient)
//	ROOT/plugins_registry/             DRA kubelet plugin registration sockets (with DRAOptions)
//
// Registration is checked like the kubelet does (API version v1beta1, an
// extended resource name); a new registration for a resource replaces the old
// endpoint, but a registration of a socket the node is connected to is
// refused, with kubelet 1.37's consequences (see admitLocked). The Node dials the plugin in ROOT/device-plugins, calls
// GetDevicePluginOptions and follows ListAndWatch; a broken stream marks the
// resource's devices unhealthy, and unless the plugin registers again within
// the grace period (the kubelet's 5 minutes) they are dropped. AddPod allocates like the kubelet: healthy
// free devices only, GetPreferredAllocation when offered, Allocate once per
// container and resource, PreStartContainer when the plugin asks for it.
//
// The control socket appears before the others and answers once they are all
// served: scripts that see any socket can use it, and an answer means the node
// is up.
//
// A restart on the same root is a kubelet restart: assignments come back from
// the checkpoint, every socket in ROOT/device-plugins is removed and
// kubelet.sock is created anew, so plugins must register again.
//
// With DRAOptions (an API server and a node name) the node also speaks DRA:
// see draplugin (registration, NodePrepareResources) and dracluster (what the
// control plane does for a pod's claims). Prepared claims are in the
// checkpoint with the pods; DRA plugins' registration sockets are not removed
// at a restart (the kubelet leaves them) and are registered again from there.
//
// Typical use in a device plugin's test:
//
//	node, err := kubeletsim.Start(ctx, t.TempDir(), slog.Default())
//	defer node.Stop()
//	// start the plugin with plugin dir node.PluginDir() ...
//	node.WaitRegistered(ctx, "example.com/vf")
//	alloc, err := node.AddPod(ctx, kubeletsim.PodSpec{Namespace: "ns", Name: "p",
//		Containers: []kubeletsim.ContainerSpec{{Name: "c", Requests: []kubeletsim.ResourceRequest{{Resource: "example.com/vf", Count: 1}}}}})
package kubeletsim

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/devplumb/devplumb/pkg/kubeletsim/dracluster"
	"github.com/devplumb/devplumb/pkg/kubeletsim/draplugin"
	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// maxSocketPath is the size of sun_path in a Linux sockaddr_un.
const maxSocketPath = 108

// Node is a running emulated kubelet. Its methods are safe for concurrent use.
type Node struct {
	root string
	log  *slog.Logger

	ctx     context.Context // ends at Stop; plugin streams run under it
	cancel  context.CancelFunc
	reg     *grpc.Server
	pr      *podresourcesserver.Server
	ctl     *controlServer
	dra     *draplugin.Manager  // nil without DRAOptions
	cluster *dracluster.Cluster // nil without DRAOptions
	wg      sync.WaitGroup
	once    sync.Once

	allocMu sync.Mutex // serializes AddPod/DelPod, so free devices cannot be taken twice

	mu        sync.Mutex
	endpoints map[string]*endpoint  // by resource name
	sockets   map[sockKey]*endpoint // every connection the node holds, by socket (see admitLocked)
	devices   map[string][]Device   // last ListAndWatch answer per resource, plugin's order
	pods      []*PodAllocation      // in the order added
	changed   chan struct{}         // closed and replaced on every change
	grace     time.Duration         // how long a dead plugin's devices stay
	expiry    map[string]*expiry    // by resource: drops a dead plugin's devices
}

// Options tune Start beyond the kubelet defaults.
type Options struct {
	// PodResources configures the PodResources server (Get mode, rate limit).
	PodResources podresourcesserver.Config
	// PluginGracePeriod is how long the devices of a plugin whose stream
	// broke stay listed (unhealthy) before they are dropped, unless it
	// registers again; default DefaultPluginGracePeriod.
	PluginGracePeriod time.Duration
	// DRA, when set, turns on DRA: plugin registration in
	// ROOT/plugins_registry and pods with ResourceClaims from the API server.
	DRA *DRAOptions
}

// DefaultPluginGracePeriod is the kubelet's endpointStopGracePeriod: after it,
// a dead plugin's resource leaves the node's capacity.
const DefaultPluginGracePeriod = 5 * time.Minute

// Start is StartWithOptions with the kubelet defaults.
func Start(ctx context.Context, root string, log *slog.Logger) (*Node, error) {
	return StartWithOptions(ctx, root, log, Options{})
}

// StartWithOptions serves the Registration, PodResources and control sockets
// under root until Stop is called or ctx ends.
func StartWithOptions(ctx context.Context, root string, log *slog.Logger, opts Options) (*Node, error) {
	if root == "" {
		return nil, fmt.Errorf("kubeletsim: root directory must be set")
	}
	if log == nil {
		log = slog.Default()
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("kubeletsim root %s: %w", root, err)
	}
	// sun_path holds 108 bytes; leave room for plugin socket names too.
	if longest := filepath.Join(abs, "device-plugins", "kubelet.sock"); len(longest) > maxSocketPath-16 {
		return nil, fmt.Errorf("kubeletsim root %s is too long: socket paths under it must stay under %d bytes (use a shorter directory, e.g. os.MkdirTemp(\"\", \"node\"))",
			abs, maxSocketPath)
	}
	if opts.PluginGracePeriod < 0 {
		return nil, fmt.Errorf("kubeletsim: plugin grace period %v is negative", opts.PluginGracePeriod)
	}
	if opts.PluginGracePeriod == 0 {
		opts.PluginGracePeriod = DefaultPluginGracePeriod
	}
	if err := checkNotServing(abs); err != nil {
		return nil, err
	}
	n := &Node{root: abs, log: log, endpoints: map[string]*endpoint{}, sockets: map[sockKey]*endpoint{},
		devices: map[string][]Device{}, changed: make(chan struct{}),
		grace: opts.PluginGracePeriod, expiry: map[string]*expiry{}}
	if err := n.loadCheckpoint(); err != nil {
		return nil, err
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if err := n.startAll(opts); err != nil {
		n.Stop()
		return nil, err
	}
	go func() {
		select {
		case <-ctx.Done():
			n.Stop()
		case <-n.ctx.Done():
		}
	}()
	n.log.Info("Kubelet emulator started", "root", n.root, "pods", len(n.pods),
		"registrationSocket", n.RegistrationSocket(), "podResourcesSocket", n.PodResourcesSocket())
	return n, nil
}

// checkNotServing refuses a root that a running node serves: starting would
// take its sockets away and leave it running deaf. A socket left by a killed
// node does not answer and is replaced as usual.
func checkNotServing(root string) error {
	sock := ControlSocket(root)
	conn, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return nil
	}
	conn.Close()
	return fmt.Errorf("kubeletsim root %s: another nodesim is serving it (%s answers); stop it first", root, sock)
}

func (n *Node) startAll(opts Options) error {
	if err := os.MkdirAll(n.stateDir(), 0o750); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	// First the control socket, so that whoever sees any of the node's sockets
	// can use it (`nodesim wait`, `nodesim pod add`); served last, so that an
	// answer on it means the node is up, which kubelet.sock, left behind by a
	// stopped node, cannot tell.
	lis, err := listenControl(n.root)
	if err != nil {
		return err
	}
	if err := n.startServers(opts); err != nil {
		lis.Close()
		return err
	}
	n.ctl = serveControl(n, lis)
	return nil
}

// startServers starts the PodResources server, DRA and plugin registration.
func (n *Node) startServers(opts Options) error {
	pr, err := podresourcesserver.Start(n.PodResourcesSocket(), n, opts.PodResources)
	if err != nil {
		return err
	}
	n.pr = pr
	podResourcesServed()
	if err := n.startDRA(opts.DRA); err != nil {
		return err
	}
	// Last: kubelet.sock appearing tells plugins (and scripts) the node is ready.
	return n.startRegistration()
}

// podResourcesServed is a test's look at the node as its PodResources socket
// appears, which scripts take for the node being there.
var podResourcesServed = func() {}

// Stop ends every server and plugin connection. Assignments stay in the
// checkpoint for the next Start. Calling Stop again does nothing.
func (n *Node) Stop() {
	n.once.Do(func() {
		n.cancel()
		if n.ctl != nil {
			n.ctl.stop()
		}
		if n.pr != nil {
			n.pr.Stop()
		}
		if n.reg != nil {
			n.reg.Stop()
		}
		if n.dra != nil {
			n.dra.Stop()
		}
		n.mu.Lock()
		for res, ep := range n.endpoints {
			ep.stop()
			delete(n.endpoints, res)
		}
		for key, ep := range n.sockets {
			ep.stop()
			delete(n.sockets, key)
		}
		for res := range n.expiry {
			n.cancelExpiryLocked(res)
		}
		n.mu.Unlock()
		n.wg.Wait()
		n.log.Info("Kubelet emulator stopped", "root", n.root)
	})
}

// Root is the kubelet root directory.
func (n *Node) Root() string { return n.root }

// PluginDir is ROOT/device-plugins, where plugins put their sockets.
func (n *Node) PluginDir() string { return PluginDir(n.root) }

// RegistrationSocket is ROOT/device-plugins/kubelet.sock.
func (n *Node) RegistrationSocket() string { return filepath.Join(n.PluginDir(), "kubelet.sock") }

// PodResourcesSocket is ROOT/pod-resources/kubelet.sock.
func (n *Node) PodResourcesSocket() string { return PodResourcesSocket(n.root) }

func (n *Node) stateDir() string { return StateDir(n.root) }

// PluginDir is the device plugin directory under a kubelet root.
func PluginDir(root string) string { return filepath.Join(root, "device-plugins") }

// PodResourcesSocket is the PodResources socket under a kubelet root.
func PodResourcesSocket(root string) string {
	return filepath.Join(root, "pod-resources", "kubelet.sock")
}

// StateDir holds nodesim's checkpoint and control socket under a kubelet root.
func StateDir(root string) string { return filepath.Join(root, "nodesim") }

// notifyLocked wakes everyone waiting for a change; n.mu must be held.
func (n *Node) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}
