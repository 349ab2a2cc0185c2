package nodecache

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// The kinds a lookup is for, devplumb_agent_cache_lookups_total's "kind".
const (
	kindPod   = "pod"
	kindClaim = "resourceclaim"
	kindSlice = "resourceslice"
	kindNAD   = "networkattachmentdefinition"
)

// Pod is kube.Cache's: this node's pod of uid (any, when empty).
func (c *Cache) Pod(namespace, name, uid string) (*corev1.Pod, bool) {
	pod, ok := c.pod(namespace, name, uid)
	c.metrics.lookup(kindPod, ok)
	if !ok {
		return nil, false
	}
	return pod.DeepCopy(), true
}

// podWait bounds how long an ADD's lookup waits for a pod the watch has not
// brought yet: the kubelet and the agent watch the same pods, and the kubelet
// creates the sandbox (the ADD) after it saw the pod, so the wait is rare and
// short; past it the ADD reads the pod.
const podWait = 500 * time.Millisecond

// AwaitPod is kube.Cache's: Pod, waiting up to podWait for the watch to
// bring the pod of uid at a resourceVersion other than rv (any, when empty).
func (c *Cache) AwaitPod(namespace, name, uid, rv string) (*corev1.Pod, bool) {
	timeout := time.NewTimer(podWait)
	defer timeout.Stop()
	for {
		seen := c.nextPodEvent()
		pod, ok := c.pod(namespace, name, uid)
		if ok && (rv == "" || pod.ResourceVersion != rv) {
			c.metrics.lookup(kindPod, true)
			return pod.DeepCopy(), true
		}
		if c.closed() || !c.pods.HasSynced() {
			break
		}
		select {
		case <-seen:
			continue
		case <-timeout.C:
		case <-c.ctx.Done():
		}
		break
	}
	c.metrics.lookup(kindPod, false)
	return nil, false
}

// pod is the cached pod namespace/name, if it has uid (any, when empty).
func (c *Cache) pod(namespace, name, uid string) (*corev1.Pod, bool) {
	if c.closed() || !c.pods.HasSynced() {
		return nil, false
	}
	obj, ok, err := c.pods.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok && (uid == "" || string(pod.UID) == uid)
}

// ResourceClaim is kube.Cache's: a claim of one of this node's pods, read
// when the pod came, and only while it is reserved for a pod the cache
// holds (a claim deleted and made again under its name is read afresh).
func (c *Cache) ResourceClaim(namespace, name string) (*resourcev1.ResourceClaim, bool) {
	claim, ok := c.claimStore().get(namespace, name)
	c.metrics.lookup(kindClaim, ok)
	if !ok {
		return nil, false
	}
	return claim.DeepCopy(), true
}

// ResourceSlices is kube.Cache's: driver's slices on this node. Another
// node's are not held: a miss.
func (c *Cache) ResourceSlices(node, driver string) ([]resourcev1.ResourceSlice, bool) {
	inf := c.sliceInformer()
	ok := node == c.node && !c.closed() && inf.HasSynced()
	c.metrics.lookup(kindSlice, ok)
	if !ok {
		return nil, false
	}
	var out []resourcev1.ResourceSlice
	for _, obj := range inf.GetStore().List() {
		if s, isSlice := obj.(*resourcev1.ResourceSlice); isSlice && s.Spec.Driver == driver {
			out = append(out, *s.DeepCopy())
		}
	}
	return out, true
}

// NAD is kube.Cache's: a NetworkAttachmentDefinition's metadata.
func (c *Cache) NAD(namespace, name string) (*metav1.PartialObjectMetadata, bool) {
	inf := c.nadInformer()
	var nad *metav1.PartialObjectMetadata
	if !c.closed() && inf.HasSynced() {
		if obj, found, err := inf.GetStore().GetByKey(namespace + "/" + name); err == nil && found {
			nad, _ = obj.(*metav1.PartialObjectMetadata)
		}
	}
	c.metrics.lookup(kindNAD, nad != nil)
	if nad == nil {
		return nil, false
	}
	return nad.DeepCopy(), true
}

// sliceInformer starts watching this node's slices at the first lookup.
func (c *Cache) sliceInformer() cache.SharedIndexInformer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slices == nil {
		c.slices = c.watch(c.resource, "resourceslices", &resourcev1.ResourceSlice{}, c.onNode)
	}
	return c.slices
}

// nadInformer starts watching NADs' metadata at the first lookup. They are
// not per node; a cluster has few.
func (c *Cache) nadInformer() cache.SharedIndexInformer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nads == nil {
		nads := c.meta.Resource(nadsResource).Namespace(metav1.NamespaceAll)
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nads.List(ctx, o) },
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return nads.Watch(ctx, o)
			},
		}
		c.nads = cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
		c.run(c.nads)
	}
	return c.nads
}

// claimStore starts reading the claims of this node's pods at the first lookup.
func (c *Cache) claimStore() *claimStore {
	c.claims.enable()
	return c.claims
}
