package nodecache

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

const (
	// claimReaders read claims side by side: a burst of pods reaches the
	// node at once.
	claimReaders = 2
	// claimQueue bounds the claims waiting to be read; beyond it a claim
	// is left to the ADD's own read.
	claimQueue = 1024
	// claimReadTimeout bounds one read.
	claimReadTimeout = 10 * time.Second
)

// claimStore holds the claims this node's pods name, read once per pod.
type claimStore struct {
	c     *Cache
	queue chan string // namespace/name

	mu      sync.Mutex
	enabled bool
	claims  map[string]*resourcev1.ResourceClaim
	queued  map[string]bool // waiting or being read
	again   map[string]bool // wanted while being read: read once more after
}

func newClaimStore(c *Cache) *claimStore {
	return &claimStore{c: c, queue: make(chan string, claimQueue),
		claims: map[string]*resourcev1.ResourceClaim{}, queued: map[string]bool{}, again: map[string]bool{}}
}

// enable starts reading claims: those of the pods already here, and of
// every pod that comes.
func (s *claimStore) enable() {
	s.mu.Lock()
	if s.enabled {
		s.mu.Unlock()
		return
	}
	s.enabled = true
	s.mu.Unlock()
	for range claimReaders {
		go s.read()
	}
	for _, obj := range s.c.pods.GetStore().List() {
		if pod, ok := obj.(*corev1.Pod); ok {
			s.want(pod)
		}
	}
}

func (s *claimStore) podHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.wantObj(obj) },
		UpdateFunc: func(_, obj any) { s.wantObj(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				s.forget(pod)
			}
		},
	}
}

func (s *claimStore) wantObj(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok {
		s.want(pod)
	}
}

// want queues the pod's claims not held for it yet.
func (s *claimStore) want(pod *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.enabled {
		return
	}
	for _, name := range claimNames(pod) {
		key := pod.Namespace + "/" + name
		switch c := s.claims[key]; {
		case c != nil && reservedFor(c, pod.UID): // held for this pod: nothing to read
		case s.queued[key]:
			// A read under way may have started before the claim was reserved
			// for this pod (one made with its nodeName, say): read it again after.
			s.again[key] = true
		default:
			s.enqueue(key)
		}
	}
}

// enqueue queues key's read; a full queue leaves the claim to the ADD's own
// read. s.mu is held.
func (s *claimStore) enqueue(key string) {
	select {
	case s.queue <- key:
		s.queued[key] = true
	default:
	}
}

func (s *claimStore) forget(pod *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range claimNames(pod) {
		delete(s.claims, pod.Namespace+"/"+name)
		delete(s.again, pod.Namespace+"/"+name)
	}
}

// read reads queued claims until the cache closes.
func (s *claimStore) read() {
	for {
		select {
		case <-s.c.ctx.Done():
			return
		case key := <-s.queue:
			s.readOne(key)
		}
	}
}

func (s *claimStore) readOne(key string) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	ctx, cancel := context.WithTimeout(s.c.ctx, claimReadTimeout)
	defer cancel()
	claim := &resourcev1.ResourceClaim{}
	err := s.c.resource.Get().Namespace(ns).Resource("resourceclaims").Name(name).Do(ctx).Into(claim)
	s.c.metrics.claimRead(err == nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.queued, key)
	if s.again[key] {
		delete(s.again, key)
		s.enqueue(key)
	}
	if err != nil {
		s.c.log.Debug("nodecache: claim not read; an ADD reads it itself", "claim", key, "err", err)
		return
	}
	claim.ManagedFields = nil
	s.claims[key] = claim
}

// get is the claim, while it is reserved for a pod the cache holds.
func (s *claimStore) get(namespace, name string) (*resourcev1.ResourceClaim, bool) {
	s.mu.Lock()
	claim := s.claims[namespace+"/"+name]
	s.mu.Unlock()
	if claim == nil || s.c.closed() {
		return nil, false
	}
	for _, r := range claim.Status.ReservedFor {
		if _, ok := s.c.pod(namespace, r.Name, string(r.UID)); ok && r.UID != "" {
			return claim, true
		}
	}
	return nil, false
}

// claimNames are the names of the ResourceClaims pod uses: its own (by
// name or made from a template) and the one the scheduler made for its
// extended resources backed by DRA.
func claimNames(pod *corev1.Pod) []string {
	var names []string
	for i := range pod.Spec.ResourceClaims {
		if name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i]); err == nil && name != nil {
			names = append(names, *name)
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		names = append(names, st.ResourceClaimName)
	}
	return slices.Compact(names)
}

func reservedFor(claim *resourcev1.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(claim.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool {
		return r.UID == uid
	})
}
