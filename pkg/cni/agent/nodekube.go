package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
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
		return newCachedKube(c, nc, log), nil
	}
}

// eventQueue bounds the Events waiting for their write: beyond it one is
// dropped (logged), as client-go's recorders drop what they cannot send.
const eventQueue = 256

// cachedKube is a client with its cache, closed with it, and an Event
// recorder: the agent's calls hand their Events over and return, and one
// writer sends them, each within the client's bound. An Event explains an
// attachment, it is not part of it: an ADD through the agent never waits
// for one.
type cachedKube struct {
	*kube.Client
	cache  *nodecache.Cache
	log    *slog.Logger
	events chan kube.PodEvent
	done   chan struct{}
	close  sync.Once
}

func newCachedKube(c *kube.Client, nc *nodecache.Cache, log *slog.Logger) *cachedKube {
	k := &cachedKube{Client: c, cache: nc, log: log, events: make(chan kube.PodEvent, eventQueue), done: make(chan struct{})}
	go k.record()
	return k
}

// RecordPodEvent queues e for the writer; it returns at once.
func (k *cachedKube) RecordPodEvent(_ context.Context, e kube.PodEvent) error {
	select {
	case k.events <- e:
		return nil
	case <-k.done:
		return errors.New("the agent's client is closed")
	default:
		k.log.Warn("Event dropped: too many waiting", "pod", e.Namespace+"/"+e.Name, "reason", e.Reason)
		return errors.New("too many Events waiting")
	}
}

func (k *cachedKube) record() {
	for {
		select {
		case <-k.done:
			return
		case e := <-k.events:
			if err := k.Client.RecordPodEvent(context.Background(), e); err != nil {
				k.log.Warn("Event not recorded", "pod", e.Namespace+"/"+e.Name, "reason", e.Reason, "err", err)
			}
		}
	}
}

// Close stops the watches and the Event writer (Events still waiting are
// dropped).
func (k *cachedKube) Close() error {
	k.close.Do(func() { close(k.done) })
	return k.cache.Close()
}

// orNil keeps a typed nil out of the interface.
func orNil(c *kube.Client, err error) (plugin.Kube, error) {
	if err != nil || c == nil {
		return nil, err
	}
	return c, nil
}
