// Package dracluster does for nodesim what the control plane does for a pod
// with ResourceClaims before the kubelet prepares them, against a real API
// server:
//
//   - the Pod object: created on this node if absent (spec.nodeName,
//     spec.resourceClaims, containers with resources.claims), bound to this
//     node if it exists unscheduled; its UID is the pod's;
//   - the resourceclaim controller: a claim per template-based pod claim
//     (generateName <pod>-<podclaim>-, annotation
//     resource.kubernetes.io/pod-claim-name, the pod as controlling owner) and
//     the pod's status.resourceClaimStatuses;
//   - the scheduler: the pod's unallocated claims allocated together with the
//     scheduler's own allocator (k8s.io/dynamic-resource-allocation/structured)
//     over the node's ResourceSlices and the DeviceClasses, the devices of
//     every allocated claim in the cluster counted as taken; then the
//     delete-protection finalizer, status.allocation and status.reservedFor
//     written as the scheduler writes them. An allocation already in a claim is
//     accepted when its node selector admits this node.
//
// Release undoes it when the pod goes: reservedFor, deallocation of a claim no
// one reserves any more (as the resourceclaim controller does), the pod's
// generated claims and the Pod object.
package dracluster
