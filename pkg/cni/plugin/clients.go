package plugin

import (
	"errors"
	"io/fs"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/podresources"
)

// apiClient is a call's Kubernetes client, made on first use.
type apiClient struct {
	make   func() (Kube, error)
	client Kube
	err    error
	made   bool
}

// get returns the client, or nil when the config has no kubeconfig.
func (a *apiClient) get() (Kube, error) {
	if !a.made {
		a.client, a.err = a.make()
		a.made = true
	}
	return a.client, a.err
}

// dra is the call's API client when it can do DRA; nil (and no error)
// without a kubeconfig.
func (a *apiClient) dra() (DRAKube, error) {
	k, err := a.get()
	if err != nil || k == nil {
		return nil, err
	}
	d, ok := k.(DRAKube)
	if !ok {
		return nil, errors.New("this devplumb build's Kubernetes client cannot read ResourceClaims")
	}
	return d, nil
}

// kubeletClient is a call's PodResources client, opened on first use.
type kubeletClient struct {
	socket  string
	timeout time.Duration
	log     *slog.Logger
	client  *podresources.Client
	// shared is Plugin.PodResources; release gives its client back.
	shared  func(socket string, timeout time.Duration, log *slog.Logger) (*podresources.Client, func(), error)
	release func()
}

// open returns the client, opening it on first use; close releases it.
func (k *kubeletClient) open() (*podresources.Client, *types.Error) {
	if k.client != nil {
		return k.client, nil
	}
	// The kubelet decides which pod has which device: a socket a NAD author
	// made (in a directory of theirs) must not.
	if err := safefile.CheckOwnedFile(k.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, cniError(ErrPodResources, "refusing \"podResourcesSocket\": it must be the kubelet's", err)
	}
	pr, err := k.dial()
	if err != nil {
		return nil, cniError(ErrPodResources, "cannot reach the kubelet PodResources API: check \"podResourcesSocket\"", err)
	}
	k.client = pr
	return pr, nil
}

func (k *kubeletClient) dial() (*podresources.Client, error) {
	if k.shared != nil {
		pr, release, err := k.shared(k.socket, k.timeout, k.log)
		k.release = release
		return pr, err
	}
	return podresources.New(k.socket, podresources.WithTimeout(k.timeout), podresources.WithLogger(k.log))
}

// asked reports whether this call asked the kubelet already.
func (k *kubeletClient) asked() bool { return k.client != nil }

func (k *kubeletClient) close() {
	switch {
	case k.release != nil:
		k.release()
		k.release = nil
	case k.client != nil:
		_ = k.client.Close()
	}
	k.client = nil
}
