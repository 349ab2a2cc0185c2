package kube

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/devplumb/devplumb/pkg/cni/dradevice"
)

// deviceStatusRefusal is the 422 kube-apiserver v1.37.2 answers a status.devices change
// without the per-driver right, built as its registry does (pkg/registry/resource:
// AuthorizedForDeviceStatus: field.Forbidden on status.devices, inside NewInvalid);
// verbs is what it tried.
func deviceStatusRefusal(verbs string) *apierrors.StatusError {
	msg := `changing status.devices requires resource="resourceclaims/driver", verb="` + verbs +
		`" permission: resourceclaims.resource.k8s.io "d.example.com" is forbidden: User "system:serviceaccount:kube-system:devplumb" cannot ` +
		strings.Trim(verbs, "[]") + ` resource "resourceclaims/driver" in API group "resource.k8s.io" in the namespace "ns"`
	return apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceClaim"}, "c",
		field.ErrorList{field.Forbidden(field.NewPath("status", "devices"), msg)})
}

// statusClient is a client of a server that answers every request with refusal.
func statusClient(t *testing.T, refusal *apierrors.StatusError) *Client {
	t.Helper()
	return serverClient(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writeStatus(w, refusal) }), 5*time.Second)
}

// The API server's refusals of devplumb's claim status apply come back as a
// PermissionError naming the rule that is missing: the per-driver right (422) with or
// without the caller counted as on the claim's node, the resourceclaims/status rule (403);
// other refusals stay what they were. Apply and removal alike.
func TestClaimStatusRefusalNamesThePermission(t *testing.T) {
	claim := dradevice.Claim{Namespace: "ns", Name: "c", Driver: "d.example.com", Pool: "node-1", Device: "dev-0"}
	rbac403 := apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims/status"}, "c",
		errors.New(`User "system:serviceaccount:kube-system:devplumb" cannot patch resource "resourceclaims/status" in API group "resource.k8s.io" in the namespace "ns"`))
	policy403 := apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "c",
		errors.New(`ValidatingAdmissionPolicy 'devplumb-node' with binding 'devplumb-node' denied request: not this node's claim`))
	otherInvalid := apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceClaim"}, "c",
		field.ErrorList{field.Invalid(field.NewPath("status", "devices").Index(0).Child("networkData", "ips"), "x", "bad CIDR")})
	for _, tc := range []struct {
		name      string
		refusal   *apierrors.StatusError
		want      *PermissionError // nil: not a PermissionError
		wantInMsg []string
	}{
		{"driver right, on the node", deviceStatusRefusal("[associated-node:patch arbitrary-node:patch]"),
			&PermissionError{Verb: "associated-node:patch", Group: "resource.k8s.io", Resource: "resourceclaims/driver", Name: "d.example.com", Namespace: "ns"},
			[]string{`verb "associated-node:patch" on resource "resourceclaims/driver"`, `name "d.example.com"`, `namespace "ns"`}},
		{"driver right, not on the node", deviceStatusRefusal("[arbitrary-node:patch]"),
			&PermissionError{Verb: "associated-node:patch", Group: "resource.k8s.io", Resource: "resourceclaims/driver", Name: "d.example.com", Namespace: "ns", NotOnNode: true},
			[]string{`verb "associated-node:patch"`, "bound to a pod on the node", `tried only "arbitrary-node:patch"`}},
		{"status rule", rbac403,
			&PermissionError{Verb: "patch", Group: "resource.k8s.io", Resource: "resourceclaims/status", Namespace: "ns"},
			[]string{`verb "patch" on resource "resourceclaims/status"`}},
		{"admission policy", policy403, nil, []string{"ValidatingAdmissionPolicy 'devplumb-node'"}},
		{"other invalid", otherInvalid, nil, []string{"bad CIDR"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := statusClient(t, tc.refusal)
			errs := map[string]error{
				"apply":  c.ApplyDeviceStatus(context.Background(), dradevice.Status{Claim: claim, InterfaceName: "net1"}),
				"remove": c.RemoveDeviceStatus(context.Background(), claim),
			}
			for op, err := range errs {
				checkRefusal(t, op, err, tc.refusal, tc.want, tc.wantInMsg)
			}
		})
	}
}

func checkRefusal(t *testing.T, op string, err error, refusal *apierrors.StatusError, want *PermissionError, inMsg []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", op)
	}
	if !errors.Is(err, refusal) && apierrors.ReasonForError(err) != refusal.ErrStatus.Reason {
		t.Errorf("%s: the API server's error is not kept: %v", op, err)
	}
	for _, s := range inMsg {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q not in %v", op, s, err)
		}
	}
	var perm *PermissionError
	if got := errors.As(err, &perm); got != (want != nil) {
		t.Fatalf("%s: PermissionError %v, want %v: %v", op, got, want != nil, err)
	}
	if want == nil {
		return
	}
	got := *perm
	got.Err = nil
	if got != *want {
		t.Errorf("%s: %+v, want %+v", op, got, *want)
	}
}
