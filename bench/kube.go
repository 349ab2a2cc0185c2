package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// kubeNodeName is the node the bench's pods are scheduled to: multus-daemon watches its pods.
const kubeNodeName = "bench-node"

// kubeNode is a real etcd + kube-apiserver (the e2e tests' harness) with the bench's
// pods in it, so that devplumb writes its network-status entry as it does in a cluster.
type kubeNode struct {
	dir string
	srv *kubeapi.Server
	mu  sync.Mutex
	uid map[string]string // pod name -> UID
}

// startKube starts the API server (DEVPLUMB_KUBE_APISERVER, DEVPLUMB_ETCD) and the
// bench's namespace.
func startKube() (*kubeNode, error) {
	dir, err := kubeapi.TempDir("devplumb-bench-kube-")
	if err != nil {
		return nil, err
	}
	srv, err := kubeapi.Start(filepath.Join(dir, "server"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	k := &kubeNode{dir: dir, srv: srv, uid: map[string]string{}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.CreateNamespace(ctx, podNS); err != nil {
		k.close()
		return nil, err
	}
	return k, nil
}

// pod creates the pod named name once and returns its UID.
func (k *kubeNode) pod(name string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if uid, ok := k.uid[name]; ok {
		return uid, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := k.srv.CreatePod(ctx, podNS, name, kubeNodeName, nil)
	if err != nil {
		return "", err
	}
	k.uid[name] = string(p.UID)
	return k.uid[name], nil
}

func (k *kubeNode) podUID(name string) (string, bool) {
	if k == nil {
		return "", false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	uid, ok := k.uid[name]
	return uid, ok
}

func (k *kubeNode) close() {
	k.srv.Close()
	os.RemoveAll(k.dir)
}
