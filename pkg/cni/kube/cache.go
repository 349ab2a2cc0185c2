package kube

import (
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Cache answers the client's reads from memory: the node agent's informers
// (pkg/cni/nodecache). A miss (false) is read from the API server, so a
// cache that lags or does not hold an object costs a read, never a wrong
// answer about a pod CNI was called for. What it returns is the caller's:
// copies, never the informers' own objects.
type Cache interface {
	// Pod is the pod namespace/name; uid, when set, is the pod CNI was
	// called for: a pod of another UID (deleted and created again under
	// the name, its deletion not seen yet) is a miss.
	Pod(namespace, name, uid string) (*corev1.Pod, bool)
	// AwaitPod is Pod for an ADD (its pod exists: the kubelet runs it) or
	// after a conflict: a watch that has not brought the pod yet, or one of
	// a resourceVersion other than rv (when set: the version a patch was
	// refused for), is waited for a moment before the miss.
	AwaitPod(namespace, name, uid, rv string) (*corev1.Pod, bool)
	ResourceClaim(namespace, name string) (*resourcev1.ResourceClaim, bool)
	ResourceSlices(node, driver string) ([]resourcev1.ResourceSlice, bool)
	NAD(namespace, name string) (*metav1.PartialObjectMetadata, bool)
}

// UseCache makes the client read from c first. Call it before the client's
// first use.
func (c *Client) UseCache(cache Cache) { c.cache = cache }

// cachedPodMeta is the pod's metadata from the cache for a network-status
// edit, nil on a miss: for the first attempt (an ADD's, await, waits a
// moment for the watch), or newer than stale, the version a conflict refused.
func (c *Client) cachedPodMeta(namespace, name, uid string, await bool, stale string) *metav1.PartialObjectMetadata {
	if c.cache == nil {
		return nil
	}
	var pod *corev1.Pod
	var ok bool
	if await || stale != "" {
		pod, ok = c.cache.AwaitPod(namespace, name, uid, stale)
	} else {
		pod, ok = c.cache.Pod(namespace, name, uid)
	}
	if !ok {
		return nil
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: pod.ObjectMeta}
}

// maxKept bounds the pods kept: a client the node agent shares among calls
// keeps one per pod it edited, until that pod's next edit.
const maxKept = 512

// keepPod remembers the pod's metadata for the next network-status edit.
func (c *Client) keepPod(pod *corev1.Pod) {
	c.keep(&metav1.PartialObjectMetadata{ObjectMeta: *pod.ObjectMeta.DeepCopy()})
}

// keepPatched remembers the pod as a network-status patch left it: the next
// edit (the pod's next attachment) starts from its resourceVersion.
func (c *Client) keepPatched(pod *metav1.PartialObjectMetadata) {
	if pod != nil {
		c.keep(pod)
	}
}

func (c *Client) keep(pod *metav1.PartialObjectMetadata) {
	c.podsMu.Lock()
	defer c.podsMu.Unlock()
	if c.pods == nil || len(c.pods) >= maxKept {
		c.pods = map[string]*metav1.PartialObjectMetadata{}
	}
	c.pods[pod.Namespace+"/"+pod.Name] = pod
}

// keptPod returns, once, the metadata of the pod last read or patched: a
// network-status edit starts from it and saves a read; when the pod changed
// since, the patch's resourceVersion precondition fails and the edit reads
// it again. One of another UID than uid (when set) is no answer.
func (c *Client) keptPod(namespace, name, uid string) *metav1.PartialObjectMetadata {
	c.podsMu.Lock()
	defer c.podsMu.Unlock()
	pod := c.pods[namespace+"/"+name]
	delete(c.pods, namespace+"/"+name)
	if pod != nil && uid != "" && string(pod.UID) != uid {
		return nil
	}
	return pod
}
