package kube

import (
	"errors"
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/pkg/cni/dradevice"
)

// PermissionError is a write the API server refused because the caller lacks one
// permission: it names that permission the way an RBAC rule grants it, so the operator
// can tell what deployments/rbac.yaml (or their own role) misses without reading the API
// server's code.
type PermissionError struct {
	Verb      string // as RBAC spells it, e.g. "associated-node:patch"
	Group     string // API group, e.g. "resource.k8s.io"
	Resource  string // resource/subresource, e.g. "resourceclaims/driver"
	Name      string // the object name the rule must allow (resourceNames); "" for any
	Namespace string
	// NotOnNode: the server did not count the caller as on the claim's node
	// ("associated-node" was not even tried), so the credential is a problem as well as
	// the rule: it must be a service account token bound to a pod on that node.
	NotOnNode bool
	Err       error
}

func (e *PermissionError) Error() string {
	return "missing permission: " + e.Missing() + ": " + e.Err.Error()
}

// Missing says what the caller lacks, as one line an operator can turn into a rule.
func (e *PermissionError) Missing() string {
	var b strings.Builder
	fmt.Fprintf(&b, "verb %q on resource %q (API group %s)", e.Verb, e.Resource, e.Group)
	if e.Name != "" {
		fmt.Fprintf(&b, " name %q", e.Name)
	}
	fmt.Fprintf(&b, " in namespace %q", e.Namespace)
	if e.NotOnNode {
		b.WriteString("; and the API server did not count this credential as being on the claim's node " +
			"(only a service account token bound to a pod on the node of the claim's allocation is), " +
			"so it tried only \"" + resourcev1.VerbPrefixArbitraryNode + "patch\"")
	}
	return b.String()
}

func (e *PermissionError) Unwrap() error { return e.Err }

// claimStatusDenied turns the API server's refusal of a claim status apply into a
// PermissionError; any other error is returned as it is.
//
// Since Kubernetes 1.36 (DRAResourceClaimGranularStatusAuthorization) a change of
// status.devices is authorized a second time, per driver, on the synthetic subresource
// resourceclaims/driver with the verb "associated-node:<verb>" (caller's pod-bound token
// on the claim's node) or "arbitrary-node:<verb>". That check runs in the registry's
// validation, so its refusal is 422 Invalid with a Forbidden cause on status.devices, not
// 403: without this mapping the operator sees "Invalid value" and an access review of
// resourceclaims/status that says yes. A 403 from the authorizer is the plain
// resourceclaims/status rule missing.
func claimStatusDenied(err error, claim dradevice.Claim) error {
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		return err
	}
	perm := &PermissionError{Group: resourcev1.GroupName, Namespace: claim.Namespace, Err: err}
	switch {
	case apierrors.IsInvalid(err):
		cause, ok := deviceStatusForbidden(status.Status())
		if !ok {
			return err
		}
		perm.Verb, perm.Resource, perm.Name = resourcev1.VerbPrefixAssociatedNode+"patch",
			"resourceclaims/"+resourcev1.SubresourceDriver, claim.Driver
		// The server lists the verbs it tried; without "associated-node" among them it did
		// not find the caller on the claim's node (or the claim names no single node).
		perm.NotOnNode = !strings.Contains(cause.Message, resourcev1.VerbPrefixAssociatedNode)
	case apierrors.IsForbidden(err) && strings.Contains(status.Status().Message, "cannot patch resource"):
		// The authorizer's own refusal ("User ... cannot patch resource ..."); an
		// admission policy's 403 says why itself and is left alone.
		perm.Verb, perm.Resource = "patch", "resourceclaims/status"
	default:
		return err
	}
	return perm
}

// deviceStatusForbidden finds the Forbidden cause on status.devices in an Invalid status.
func deviceStatusForbidden(st metav1.Status) (metav1.StatusCause, bool) {
	if st.Details == nil {
		return metav1.StatusCause{}, false
	}
	for _, c := range st.Details.Causes {
		if c.Type == metav1.CauseTypeForbidden && strings.HasPrefix(c.Field, "status.devices") {
			return c, true
		}
	}
	return metav1.StatusCause{}, false
}
