package kube

import (
	"encoding/json"
	"fmt"
	"reflect"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusList is a pod's network-status list as it was read. Entries stay raw JSON so
// that writing devplumb's own entry back keeps everyone else's exactly as they wrote it:
// decoding into nadv1.NetworkStatus would drop fields this client version does not know
// (a newer Multus, a vendor's extra keys, device-info of a later spec) and add "dns":{}.
type statusList []json.RawMessage

// entryKey is what identifies an entry: network name and interface.
type entryKey struct {
	Name      string `json:"name"`
	Interface string `json:"interface"`
}

// parseStatus returns the pod's network-status entries; no annotation is an empty list.
// Only the list itself must be valid JSON: an entry devplumb cannot read is kept as it is.
func parseStatus(pod *metav1.PartialObjectMetadata) (statusList, error) {
	raw, ok := pod.Annotations[nadv1.NetworkStatusAnnot]
	if !ok || raw == "" {
		return nil, nil
	}
	var list statusList
	if err := json.Unmarshal([]byte(raw), &list); err != nil {
		return nil, fmt.Errorf("%w on pod %s/%s: %w", ErrBadAnnotation, pod.Namespace, pod.Name, err)
	}
	return list, nil
}

// is tells whether raw is the entry of network and ifName. An entry that is not an
// object with those keys is nobody devplumb knows.
func is(raw json.RawMessage, network, ifName string) bool {
	var k entryKey
	if err := json.Unmarshal(raw, &k); err != nil {
		return false
	}
	return k.Name == network && k.Interface == ifName
}

// upsert replaces the entry with entry's name and interface, or appends entry; it
// reports false when the list already holds exactly that entry.
func upsert(list statusList, entry nadv1.NetworkStatus) (statusList, bool, error) {
	b, err := json.Marshal(entry)
	if err != nil {
		return nil, false, fmt.Errorf("encode network-status entry: %w", err)
	}
	out := make(statusList, 0, len(list)+1)
	found, changed := false, false
	for _, raw := range list {
		if !is(raw, entry.Name, entry.Interface) {
			out = append(out, raw)
			continue
		}
		if found { // a duplicate of ours: one entry per attachment
			changed = true
			continue
		}
		found = true
		if !sameJSON(raw, b) {
			changed = true
		}
		out = append(out, b)
	}
	if !found {
		out, changed = append(out, b), true
	}
	return out, changed, nil
}

// remove drops every entry of network and ifName.
func remove(list statusList, network, ifName string) (statusList, bool) {
	out := make(statusList, 0, len(list))
	for _, raw := range list {
		if !is(raw, network, ifName) {
			out = append(out, raw)
		}
	}
	return out, len(out) != len(list)
}

// sameJSON compares two JSON values by meaning (key order and spacing aside).
func sameJSON(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
