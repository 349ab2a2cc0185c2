package agent

import (
	"log/slog"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/cni/nodecache"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
)

// NodeKube is a Config.NewKube: it builds the client of a kubeconfig with a cache of node's
// objects (none without a node name: every read goes to the API server).
func NodeKube(node string, m *nodecache.Metrics) func(string, time.Duration, *slog.Logger) (plugin.Kube, error) {
	return func(kubeconfig string, timeout time.Duration, log *slog.Logger) (plugin.Kube, error) {
		cfg, err := kube.LoadConfig(kubeconfig)
		if err != nil {
			return nil, err
		}
		c, err := kube.NewForConfig(cfg, timeout, log)
		if err != nil || node == "" {
			return orNil(c, err)
		}
		nc, err := nodecache.New(cfg, node, m, log)
		if err != nil {
			return nil, err
		}
		c.UseCache(nc)
		return &cachedKube{Client: c, cache: nc}, nil
	}
}

// cachedKube is a client with its cache, closed with it.
type cachedKube struct {
	*kube.Client
	cache *nodecache.Cache
}

func (k *cachedKube) Close() error { return k.cache.Close() }

// orNil keeps a typed nil out of the interface.
func orNil(c *kube.Client, err error) (plugin.Kube, error) {
	if err != nil || c == nil {
		return nil, err
	}
	return c, nil
}
