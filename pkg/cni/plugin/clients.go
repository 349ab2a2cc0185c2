package plugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/podresources"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
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
	ahead   *aheadGet    // the pod's Get, started before the call parsed its config
	spawn   func(func()) // Plugin.Go
}

// aheadGet is a pod's PodResources Get started at the very beginning of an
// ADD: the kubelet's answer is most of the wait before the device is taken,
// and it comes while the call parses its config and checks its delegates.
// Only the call that started it takes its answer, once, so the answer is as
// fresh as the call's own Get would be: it was asked after the call began.
type aheadGet struct {
	namespace, name string
	done            chan struct{}
	pod             *v1.PodResources
	err             error
}

// getAhead opens the client and starts the Get of pod namespace/name in
// the background. Nothing is started when the client cannot be opened:
// the call's own Get then says why.
func (k *kubeletClient) getAhead(namespace, name string) {
	pr, cerr := k.open()
	if cerr != nil {
		return
	}
	a := &aheadGet{namespace: namespace, name: name, done: make(chan struct{})}
	k.ahead = a
	aside(k.spawn, func() {
		defer close(a.done)
		ctx, cancel := timeoutCtx(k.timeout)
		defer cancel()
		a.pod, a.err = pr.Get(ctx, namespace, name)
	})
}

// adopt takes over the client and the Get of ahead, a kubeletClient of the
// same call that started it before this one existed. Both name the kubelet
// of the node config the call loaded once; ahead is closed, not taken, if
// it asked another kubelet all the same.
func (k *kubeletClient) adopt(ahead *kubeletClient) {
	if ahead == nil {
		return
	}
	if ahead.socket != k.socket || k.client != nil {
		ahead.close()
		return
	}
	k.client, k.release, k.ahead = ahead.client, ahead.release, ahead.ahead
}

// get is the Get of pod namespace/name on the client open returned: the
// answer of the Get started ahead for that pod, else a Get of its own.
func (k *kubeletClient) get(ctx context.Context, namespace, name string) (*v1.PodResources, error) {
	if a := k.ahead; a != nil && a.namespace == namespace && a.name == name {
		k.ahead = nil
		select {
		case <-a.done:
			return a.pod, a.err
		case <-ctx.Done():
			return nil, fmt.Errorf("PodResources Get of pod %s/%s started ahead: %w", namespace, name, ctx.Err())
		}
	}
	return k.client.Get(ctx, namespace, name)
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

// asked reports whether this call asked the kubelet already: a Get
// started ahead whose answer the call never took does not count.
func (k *kubeletClient) asked() bool { return k.client != nil && k.ahead == nil }

func (k *kubeletClient) close() {
	if k == nil {
		return
	}
	k.ahead = nil
	switch {
	case k.release != nil:
		k.release()
		k.release = nil
	case k.client != nil:
		_ = k.client.Close()
	}
	k.client = nil
}
