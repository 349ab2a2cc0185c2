// Package node runs a real single-node Kubernetes for end-to-end tests: etcd and
// kube-apiserver (e2e/kubeapi), kube-scheduler, kube-controller-manager, the kubelet and
// containerd (with CDI) over runc, the project's images built without Docker (package
// images) and imported into containerd. Nothing is mocked.
//
// The node lives in a temporary directory and a mount namespace of its own, where that
// directory's parts are mounted on the paths a node hard-codes (/var/lib/kubelet,
// /opt/cni/bin, /etc/cni/net.d, /run/netns, /var/lib/cni, ...): the host's own are never
// written. What cannot be kept apart — processes, the kubelet's cgroups and sysctls, the
// bridge and the service address link — is put back by Close. Start refuses to run beside
// a kubelet it did not start.
package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// Name is the node's name.
const Name = "devplumb-node"

// The cluster's first service address, where the API server serves (see addServiceAddress).
const (
	serviceCIDR    = "10.96.0.0/24"
	serviceAddress = "10.96.0.1"
	serviceLink    = "dpnode-svc"
	bridgeName     = "dpnode0"
)

// hostPaths are the paths a node writes that are mounted from the node's directory in its
// mount namespace (relative names under Dir/host). /run is the node's own as a whole:
// a DaemonSet mounting the host's /run (Multus thick does, for its socket in /run/multus)
// sees the node's, and a daemon that removes and makes again its directory there cannot
// do that to a mount point.
var hostPaths = []string{
	"/var/lib/kubelet", "/opt/cni/bin", "/etc/cni/net.d", "/etc/cni/multus", "/var/lib/cni",
	"/run", "/var/log/pods", "/var/log/containers", "/usr/libexec/kubernetes",
}

// runDirs are the node's directories in its /run that exist before anything runs: what
// the tests and the DaemonSets' hostPath volumes use.
var runDirs = []string{"k8s.cni.cncf.io", "cdi", "netns", "containerd", "vswitch"}

// Node is a running node.
type Node struct {
	Dir              string // everything of the node: logs, state, the host paths (HostPath)
	API              *kubeapi.Server
	Client           kubernetes.Interface
	ContainerdSocket string

	bin               *binaries
	host              *host
	ns                *mountNS
	containerd        *kubeapi.Proc
	kubelet           *kubeapi.Proc
	kubeletHealthz    int
	scheduler         *kubeapi.Proc
	controllerManager *kubeapi.Proc
}

// HostPath is where the node's path p (one of hostPaths or below) is, seen from the host.
func (n *Node) HostPath(p string) string {
	return filepath.Join(n.Dir, "host", p)
}

// Options are what Start needs from the tests.
type Options struct {
	CNIBinDir string   // CNI plugins copied into the node's /opt/cni/bin
	Images    []string // docker-archive tarballs imported into containerd
}

// Start brings the node up in dir, a directory the caller owns (see kubeapi.TempDir).
// On error, whatever was started is stopped and the host restored.
func Start(ctx context.Context, dir string, o Options) (n *Node, err error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	h, err := preflight()
	if err != nil {
		return nil, err
	}
	n = &Node{Dir: dir, bin: bin, host: h}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
			n = nil
		}
	}()
	steps := []func() error{
		n.mountHostPaths,
		func() error { return n.installCNI(o.CNIBinDir) },
		n.startAPIServer,
		n.startContainerd,
		func() error { return n.importImages(ctx, o.Images) },
		n.startControlPlane,
		n.StartKubelet,
		func() error { return n.waitNodeReady(ctx) },
	}
	for _, step := range steps {
		if err = step(); err != nil {
			return n, fmt.Errorf("%w\n%s", err, n.Logs()) // the deferred Close stops n
		}
	}
	return n, nil
}

func (n *Node) mountHostPaths() error {
	ns, err := newMountNS(n.Dir)
	if err != nil {
		return err
	}
	n.ns = ns
	for _, p := range hostPaths {
		src := n.HostPath(p)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		if err := n.host.mountPoint(p); err != nil {
			return err
		}
		// What the host has mounted there (its /run/netns) goes, in the node's namespace
		// only: a runtime looking up the mount of the path must find the node's.
		ns.unmount(p)
		if err := ns.bind(src, p); err != nil {
			return err
		}
	}
	for _, d := range runDirs {
		if err := os.MkdirAll(n.HostPath(filepath.Join("/run", d)), 0o755); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	// As on the host, where `ip netns` and the runtime make /run/netns a shared mount (bound
	// on itself): netdev-dp's HostToContainer mount of it needs that.
	if err := ns.bind(n.HostPath("/run/netns"), "/run/netns"); err != nil {
		return err
	}
	if err := ns.makeShared("--make-shared", "/run/netns"); err != nil {
		return err
	}
	// As on a systemd host, whose mounts are all shared (systemd makes / rshared; this
	// machine's are private): Multus thick's DaemonSet mounts / with HostToContainer and
	// /opt/cni/bin with Bidirectional, which containerd refuses on a private mount. Only
	// the node's namespace changes (its mounts are copies); the host's stay as they are.
	return ns.makeShared("--make-rshared", "/")
}

func (n *Node) startAPIServer() error {
	n.host.Links = append(n.host.Links, serviceLink, bridgeName)
	if err := n.host.save(); err != nil {
		return err
	}
	if err := addServiceAddress(serviceLink, serviceAddress+"/32"); err != nil {
		return err
	}
	s, err := kubeapi.StartWith(filepath.Join(n.Dir, "apiserver"), kubeapi.Options{
		Address: serviceAddress, Port: 443, ServiceCIDR: serviceCIDR, ServiceAccounts: true,
		AllowPrivileged: true})
	if err != nil {
		return fmt.Errorf("node: start API server: %w", err)
	}
	n.API, n.Client = s, s.Client
	return nil
}

// errGiveUp in a waitFor check's error ends the wait at once.
var errGiveUp = errors.New("gave up")

// waitFor polls check until it returns nil, fails with errGiveUp, or bound passes.
func (n *Node) waitFor(what string, bound time.Duration, check func() error) error {
	deadline := time.Now().Add(bound)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if errors.Is(err, errGiveUp) || time.Now().After(deadline) {
			return fmt.Errorf("node: %s not ready within %s: %w", what, bound, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
