package agent

import (
	"crypto/sha256"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/plugin"
	"github.com/devplumb/devplumb/podresources"
)

// maxKubeconfigs bounds the clients kept: a node config names one
// kubeconfig; one it named before a change is kept until it is the one
// unused longest.
const maxKubeconfigs = 4

// kubeCache keeps one Kubernetes client per kubeconfig file, by its cleaned
// path and the file's identity (device and inode: another spelling of the
// path is the same client, a file replaced is a new one), built again when
// the content changes (a rotated token or certificate written into it).
// Files the kubeconfig only names are client-go's to reload. A client that
// is an io.Closer (one with informers) is closed when replaced or dropped: a
// call still using it reads what it held, or the API server.
type kubeCache struct {
	build func(kubeconfig string, timeout time.Duration, log *slog.Logger) (plugin.Kube, error)
	log   *slog.Logger

	mu      sync.Mutex // held while building: each kubeconfig is built once
	clients map[kubeKey]kubeClient
	uses    uint64 // gets so far: the client unused longest is dropped first
}

type kubeKey struct {
	path string
	file fileID
}

type kubeClient struct {
	sum     [sha256.Size]byte
	timeout time.Duration
	client  plugin.Kube
	used    uint64 // the get that last returned it
}

// get is plugin.Plugin.NewKube. The client logs through the agent's logger,
// not the first call's: it outlives that call.
func (k *kubeCache) get(kubeconfig string, timeout time.Duration, _ *slog.Logger) (plugin.Kube, error) {
	kubeconfig = filepath.Clean(kubeconfig)
	id, idOK := statID(kubeconfig)
	data, err := os.ReadFile(kubeconfig)
	if err != nil || !idOK {
		return k.build(kubeconfig, timeout, k.log) // it says what is wrong with the file
	}
	key, sum := kubeKey{path: kubeconfig, file: id}, sha256.Sum256(data)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.uses++
	if c, ok := k.clients[key]; ok && c.sum == sum && c.timeout == timeout {
		c.used = k.uses
		k.clients[key] = c
		return c.client, nil
	}
	client, err := k.build(kubeconfig, timeout, k.log)
	if err != nil {
		return nil, err
	}
	k.dropLocked(func(kk kubeKey) bool { return kk.path == kubeconfig || kk == key })
	if len(k.clients) >= maxKubeconfigs {
		k.dropOldestLocked()
	}
	if k.clients == nil {
		k.clients = map[kubeKey]kubeClient{}
	}
	k.clients[key] = kubeClient{sum: sum, timeout: timeout, client: client, used: k.uses}
	return client, nil
}

// dropLocked closes and forgets the clients whose key matches.
func (k *kubeCache) dropLocked(match func(kubeKey) bool) {
	for key, c := range k.clients {
		if match(key) {
			closeClient(c.client)
			delete(k.clients, key)
		}
	}
}

func (k *kubeCache) dropOldestLocked() {
	var oldest *kubeKey
	for key, c := range k.clients {
		if oldest == nil || c.used < k.clients[*oldest].used {
			oldest = &key
		}
	}
	if oldest != nil {
		k.dropLocked(func(kk kubeKey) bool { return kk == *oldest })
	}
}

func (k *kubeCache) closeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closeLocked()
	k.clients = nil
}

func (k *kubeCache) closeLocked() {
	for _, c := range k.clients {
		closeClient(c.client)
	}
}

func closeClient(c plugin.Kube) {
	if cl, ok := c.(io.Closer); ok {
		_ = cl.Close()
	}
}

// kubeletCache shares one PodResources client per socket path among calls.
// A socket file replaced (the kubelet restarted) gets a new client, so no
// call waits out gRPC's reconnect backoff to a socket that is gone; the old
// one is closed when its last call releases it.
type kubeletCache struct {
	dial func(socket string, opts ...podresources.Option) (*podresources.Client, error)
	log  *slog.Logger

	mu    sync.Mutex
	conns map[string]*kubeletConn
}

type kubeletConn struct {
	client *podresources.Client
	file   fileID
	refs   int
	gone   bool // replaced or the cache closed: close at the last release
}

// fileID tells a socket file from its replacement.
type fileID struct{ dev, ino uint64 }

func statID(path string) (fileID, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, true //nolint:unconvert // Dev's type differs by arch
}

// get is plugin.Plugin.PodResources.
func (k *kubeletCache) get(socket string, timeout time.Duration, _ *slog.Logger) (*podresources.Client, func(), error) {
	// One client serves every call on the node: a burst of pods shares its
	// Lists (one call at a time) within the kubelet's rate limit, so the
	// kubelet refuses none of them.
	opts := []podresources.Option{podresources.WithTimeout(timeout), podresources.WithLogger(k.log),
		podresources.WithSharedCalls(), podresources.WithRateLimit(podresources.SharedQPS, podresources.SharedBurst)}
	id, ok := statID(socket)
	if !ok { // podresources.New names what is wrong with the path
		c, err := k.dial(socket, opts...)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { _ = c.Close() }, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	conn := k.conns[socket]
	if conn == nil || conn.file != id {
		c, err := k.dial(socket, opts...)
		if err != nil {
			return nil, nil, err
		}
		if conn != nil {
			k.drop(conn)
		}
		conn = &kubeletConn{client: c, file: id}
		if k.conns == nil {
			k.conns = map[string]*kubeletConn{}
		}
		k.conns[socket] = conn
	}
	conn.refs++
	return conn.client, func() { k.release(conn) }, nil
}

func (k *kubeletCache) release(conn *kubeletConn) {
	k.mu.Lock()
	defer k.mu.Unlock()
	conn.refs--
	if conn.gone && conn.refs == 0 {
		_ = conn.client.Close()
	}
}

// drop marks conn replaced, closing it now when no call holds it.
func (k *kubeletCache) drop(conn *kubeletConn) {
	conn.gone = true
	if conn.refs == 0 {
		_ = conn.client.Close()
	}
}

func (k *kubeletCache) closeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for socket, conn := range k.conns {
		k.drop(conn)
		delete(k.conns, socket)
	}
}
