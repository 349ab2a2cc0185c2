// Package nodecache is the node agent's view of the API server: what a
// devplumb ADD reads, held in memory so that an ADD through the agent sends
// the API server writes only. It watches this node's pods and ResourceSlices
// (both selected by spec.nodeName on the server, so a cluster's other nodes
// cost it nothing), reads each ResourceClaim its pods name once when the pod
// reaches the node (the scheduler allocated and reserved it before binding
// the pod, and devplumb reads nothing else of it), and watches the metadata
// of NetworkAttachmentDefinitions. Slices, claims and NADs are watched from
// their first lookup on: a node whose networks never use DRA or a NAD's
// resourceName watches neither. It is a kube.Cache: a miss is read from the
// API server by the client, so a lagging cache costs a read, never a wrong
// answer.
package nodecache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

var nadsResource = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// Cache holds one node's objects as one identity (a kubeconfig) sees them.
type Cache struct {
	node    string
	log     *slog.Logger
	metrics *Metrics
	// REST clients of core/v1 and resource.k8s.io/v1 over a scheme of those
	// two groups (rest.go): the typed clientset and its informer factory
	// link and register every API group, which would double the agent's
	// memory before it holds a single pod.
	core, resource rest.Interface
	meta           metadata.Interface

	ctx    context.Context
	cancel context.CancelFunc
	onNode fields.Selector
	pods   cache.SharedIndexInformer

	mu     sync.Mutex // guards the lazily started parts below
	slices cache.SharedIndexInformer
	nads   cache.SharedIndexInformer
	claims *claimStore
}

// New starts watching node's pods as cfg's identity; Close stops it.
func New(cfg *rest.Config, node string, m *Metrics, log *slog.Logger) (*Cache, error) {
	if node == "" {
		return nil, errors.New("nodecache: no node name")
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "devplumb-agent"
	core, res, err := restClients(cfg)
	if err != nil {
		return nil, err
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("nodecache: metadata client for %s: %w", cfg.Host, err)
	}
	if m == nil {
		m = NewMetrics()
	}
	c := &Cache{node: node, log: log, metrics: m, core: core, resource: res, meta: mc,
		onNode: fields.OneTermEqualSelector("spec.nodeName", node)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.pods = c.watch(c.core, "pods", &corev1.Pod{}, c.onNode)
	c.claims = newClaimStore(c)
	if _, err := c.pods.AddEventHandler(c.claims.podHandler()); err != nil {
		c.cancel()
		return nil, fmt.Errorf("nodecache: pod handler: %w", err)
	}
	m.add(c)
	return c, nil
}

// watch starts an informer of resource, selected by sel on the API server.
func (c *Cache) watch(client rest.Interface, resource string, obj runtime.Object, sel fields.Selector) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(client, resource, metav1.NamespaceAll, sel), obj, 0, cache.Indexers{})
	c.run(inf)
	return inf
}

// run runs inf until the cache closes, keeping its copies small.
func (c *Cache) run(inf cache.SharedIndexInformer) {
	if err := inf.SetTransform(dropManagedFields); err != nil {
		c.log.Error("nodecache: transform", "err", err)
	}
	go inf.RunWithContext(c.ctx)
}

// dropManagedFields keeps the informers' copies small: devplumb reads no
// field manager's record.
func dropManagedFields(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// Close stops the watches; lookups miss from then on.
func (c *Cache) Close() error {
	c.cancel()
	c.metrics.remove(c)
	return nil
}

func (c *Cache) closed() bool { return c.ctx.Err() != nil }
