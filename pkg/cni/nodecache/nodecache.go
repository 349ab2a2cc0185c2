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
	"fmt"
	"log/slog"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
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
	client  kubernetes.Interface
	meta    metadata.Interface

	ctx    context.Context
	cancel context.CancelFunc

	nodeScoped informers.SharedInformerFactory // pods and ResourceSlices of node
	pods       cache.SharedIndexInformer

	mu     sync.Mutex // guards the lazily started parts below
	slices cache.SharedIndexInformer
	nads   cache.SharedIndexInformer
	claims *claimStore
}

// New starts watching node's pods as cfg's identity; Close stops it.
func New(cfg *rest.Config, node string, m *Metrics, log *slog.Logger) (*Cache, error) {
	if node == "" {
		return nil, fmt.Errorf("nodecache: no node name")
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "devplumb-agent"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("nodecache: client for %s: %w", cfg.Host, err)
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("nodecache: metadata client for %s: %w", cfg.Host, err)
	}
	return start(cs, mc, node, m, log), nil
}

func start(cs kubernetes.Interface, mc metadata.Interface, node string, m *Metrics, log *slog.Logger) *Cache {
	if m == nil {
		m = NewMetrics()
	}
	c := &Cache{node: node, log: log, metrics: m, client: cs, meta: mc}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	onNode := fields.OneTermEqualSelector("spec.nodeName", node).String()
	c.nodeScoped = informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = onNode }),
		informers.WithTransform(dropManagedFields))
	c.pods = c.nodeScoped.Core().V1().Pods().Informer()
	c.claims = newClaimStore(c)
	if _, err := c.pods.AddEventHandler(c.claims.podHandler()); err != nil {
		log.Error("nodecache: pod handler", "err", err)
	}
	c.nodeScoped.Start(c.ctx.Done())
	m.add(c)
	return c
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
	c.nodeScoped.Shutdown()
	return nil
}

func (c *Cache) closed() bool { return c.ctx.Err() != nil }
