package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SetNetworkStatus adds entry to the network-status annotation of pod namespace/name, or
// replaces the entry with the same network name and interface; all other entries are kept
// as they are. uid, when not empty, must be the pod's UID: a pod recreated under the same
// name is never touched (ErrPodUIDMismatch).
func (c *Client) SetNetworkStatus(ctx context.Context, namespace, name, uid string, entry nadv1.NetworkStatus) error {
	if entry.Name == "" {
		return fmt.Errorf("kube: network-status entry for pod %s/%s has no network name", namespace, name)
	}
	err := c.editStatus(ctx, namespace, name, uid, true, func(list statusList) (statusList, bool, error) {
		return upsert(list, entry)
	})
	if err != nil {
		return fmt.Errorf("kube: set network-status %q/%q of pod %s/%s: %w", entry.Name, entry.Interface, namespace, name, err)
	}
	return nil
}

// RemoveNetworkStatus removes the entry of network and ifName from the pod's
// network-status annotation. A pod that is gone, was recreated (other UID), has no such
// entry or an unreadable annotation is not an error: there is nothing of ours to remove.
func (c *Client) RemoveNetworkStatus(ctx context.Context, namespace, name, uid, network, ifName string) error {
	return c.RemoveNetworkStatusUnless(ctx, namespace, name, uid, network, ifName, nil)
}

// RemoveNetworkStatusUnless is RemoveNetworkStatus leaving the entry when keep (nil: never)
// reports, at each attempt after the pod was read, that the entry is no longer the caller's
// (a later ADD wrote it): a patch refused for a conflict asks again with the newer pod.
func (c *Client) RemoveNetworkStatusUnless(ctx context.Context, namespace, name, uid, network, ifName string,
	keep func() bool) error {
	err := c.editStatus(ctx, namespace, name, uid, false, func(list statusList) (statusList, bool, error) {
		if keep != nil && keep() {
			return list, false, nil
		}
		out, changed := remove(list, network, ifName)
		return out, changed, nil
	})
	switch {
	case err == nil:
		return nil
	case isAny(err, ErrPodNotFound, ErrPodUIDMismatch):
		c.log.Debug("network-status: pod gone, nothing to remove", "pod", namespace+"/"+name, "reason", err)
		return nil
	case isAny(err, ErrBadAnnotation):
		// Someone else wrote an unreadable list; our entry cannot be found in it, and
		// failing DEL would only stop the pod's teardown.
		c.log.Warn("network-status: unreadable annotation left as it is", "pod", namespace+"/"+name, "err", err)
		return nil
	default:
		return fmt.Errorf("kube: remove network-status %q/%q of pod %s/%s: %w", network, ifName, namespace, name, err)
	}
}

// editStatus reads the pod, applies edit to its network-status list and, when edit
// changed it, writes it back with a JSON merge patch that carries the resourceVersion
// and UID that were read: the API server rejects the patch with a conflict when the pod
// changed in between, and the read-edit-patch cycle is retried within the bound. The
// first attempt starts from the pod this client last read or patched, else from its
// cache's (an ADD's, await, waits a moment for a pod the watch has not brought yet); one
// after a conflict, or after a write that may have landed though it failed, waits a
// moment for the watch's newer pod before it reads the pod.
func (c *Client) editStatus(ctx context.Context, namespace, name, uid string, await bool,
	edit func(statusList) (statusList, bool, error)) error {
	if namespace == "" || name == "" {
		return fmt.Errorf("pod %q/%q: namespace and name are required", namespace, name)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	pods := c.meta.Resource(podsResource).Namespace(namespace)
	first, stale := true, ""
	return c.retry(ctx, func(ctx context.Context) (bool, error) {
		pod := c.keptPod(namespace, name, uid)
		if pod == nil && (first || stale != "") {
			pod = c.cachedPodMeta(namespace, name, uid, await, stale)
		}
		first, stale = false, ""
		if pod == nil {
			var err error
			if pod, err = pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return podError(err, namespace, name)
			}
		}
		if uid != "" && string(pod.UID) != uid {
			return true, fmt.Errorf("%w: %s/%s has UID %s, CNI was called for %s", ErrPodUIDMismatch, namespace, name, pod.UID, uid)
		}
		list, err := parseStatus(pod)
		if err != nil {
			return true, err
		}
		list, changed, err := edit(list)
		if err != nil || !changed {
			return true, err
		}
		patch, err := statusPatch(pod, list)
		if err != nil {
			return true, err
		}
		patched, err := pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) || mayHaveLanded(err) {
			// The next attempt waits for the watch's pod past this version: a
			// conflict's writer, or this patch itself, written before its answer was
			// lost; only when none comes is the pod read.
			stale = pod.ResourceVersion
		}
		if err != nil {
			return podError(err, namespace, name)
		}
		c.keepPatched(patched)
		return true, nil
	})
}

// mayHaveLanded tells whether a write that failed with err may have been made all
// the same: the API server timed out after taking it (504), or its answer never came
// (the request's own timeout, a connection lost). An overloaded API server answers
// this way, and the retry then costs it a read unless the watch shows the write.
func mayHaveLanded(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsTimeout(err)
	}
	return !errors.Is(err, syscall.ECONNREFUSED) // refused: it never reached the server
}

// podError maps an API error on the pod: not found is final, the rest is for retry to judge.
func podError(err error, namespace, name string) (bool, error) {
	if apierrors.IsNotFound(err) {
		return true, fmt.Errorf("%w: %s/%s", ErrPodNotFound, namespace, name)
	}
	return false, err
}

// statusPatch is a JSON merge patch setting the annotation (deleting it when list is
// empty) with pod's resourceVersion and UID as preconditions.
func statusPatch(pod *metav1.PartialObjectMetadata, list statusList) ([]byte, error) {
	var value any // nil deletes the key in a merge patch
	if len(list) > 0 {
		b, err := json.MarshalIndent(list, "", "    ")
		if err != nil {
			return nil, fmt.Errorf("encode network-status: %w", err)
		}
		value = string(b)
	}
	patch := map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion,
		"uid":             string(pod.UID),
		"annotations":     map[string]any{nadv1.NetworkStatusAnnot: value},
	}}
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("encode patch: %w", err)
	}
	return b, nil
}
