package agent

import (
	"crypto/sha256"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/plugin"
	"github.com/devplumb/devplumb/podresources"
)

// maxKubeconfigs bounds the clients kept: a node's configs name a few
// kubeconfigs; more are dropped and built again when used.
const maxKubeconfigs = 32

// kubeCache keeps one Kubernetes client per kubeconfig path, built again
// when the file's content changes (a rotated token or certificate written
// into it). Files the kubeconfig only names are client-go's to reload. A
// client that is an io.Closer (one with informers) is closed when replaced
// or dropped: a call still using it reads what it held, or the API server.
type kubeCache struct {
	build func(kubeconfig string, timeout time.Duration, log *slog.Logger) (plugin.Kube, error)
	log   *slog.Logger

	mu      sync.Mutex // held while building: each kubeconfig is built once
	clients map[string]kubeClient
}

type kubeClient struct {
	sum     [sha256.Size]byte
	timeout time.Duration
	client  plugin.Kube
}

// get is plugin.Plugin.NewKube. The client logs through the agent's logger,
// not the first call's: it outlives that call.
func (k *kubeCache) get(kubeconfig string, timeout time.Duration, _ *slog.Logger) (plugin.Kube, error) {
	data, err := os.ReadFile(kubeconfig)
	if err != nil {
		return k.build(kubeconfig, timeout, k.log) // it says what is wrong with the file
	}
	sum := sha256.Sum256(data)
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.clients[kubeconfig]; ok && c.sum == sum && c.timeout == timeout {
		return c.client, nil
	}
	client, err := k.build(kubeconfig, timeout, k.log)
	if err != nil {
		return nil, err
	}
	if old, ok := k.clients[kubeconfig]; ok {
		closeClient(old.client)
		delete(k.clients, kubeconfig)
	}
	if k.clients == nil || len(k.clients) >= maxKubeconfigs {
		k.closeLocked()
		k.clients = map[string]kubeClient{}
	}
	k.clients[kubeconfig] = kubeClient{sum: sum, timeout: timeout, client: client}
	return client, nil
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
	opts := []podresources.Option{podresources.WithTimeout(timeout), podresources.WithLogger(k.log)}
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
