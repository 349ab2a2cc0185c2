package dra_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// shippedRules are the rules of deployments/rbac.yaml's ClusterRole, less those on
// resources in drop.
func shippedRules(t *testing.T, drop ...string) []rbacv1.PolicyRule {
	t.Helper()
	objs, err := e2etest.Objects(filepath.Join(testenv.ModuleRoot(), "deployments", "rbac.yaml"))
	e2etest.Must(t, err)
	var out []rbacv1.PolicyRule
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		role := &rbacv1.ClusterRole{}
		e2etest.Must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role))
		for _, r := range role.Rules {
			if !slices.ContainsFunc(r.Resources, func(res string) bool { return slices.Contains(drop, res) }) {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("rbac.yaml: no ClusterRole rules")
	}
	return out
}

// granularClaimStatus tells whether the API server authorizes a claim's status.devices
// per driver and node: Kubernetes 1.36 and later (DRAResourceClaimGranularStatusAuthorization,
// on by default). The matrix runs these tests on older minors too, where the write needs
// resourceclaims/status alone.
func granularClaimStatus(t *testing.T) bool {
	t.Helper()
	return serverAtLeast(t, 1, 36)
}

// serverAtLeast tells whether the API server is at least major.minor.
func serverAtLeast(t *testing.T, major, minor uint) bool {
	t.Helper()
	return e2etest.ServerAtLeast(t, srv.Client.Discovery(), major, minor)
}

// Kubernetes 1.36+ refuses devplumb's claim status write without the
// resourceclaims/driver rule rbac.yaml ships, though resourceclaims/status patch is
// granted: ADD fails and its CNI error names the missing permission (verb, resource,
// driver, namespace). Nothing stays behind. Older API servers accept the write.
func TestCNIClaimStatusNeedsDriverRule(t *testing.T) {
	bindCNIRole(t, "cni-no-driver-rule", shippedRules(t, "resourceclaims/driver"))
	n := newCNINode(t)
	a := n.claimADD(n.devplumbKubeconfig())
	res := a.res
	if !granularClaimStatus(t) {
		n.acceptedThenDeleted(a)
		return
	}
	for _, s := range []string{"writing the status of ResourceClaim default/" + a.claim,
		`verb "associated-node:patch" on resource "resourceclaims/driver"`, `name "` + n.driver + `"`, `in namespace "default"`} {
		if res.Code != 106 || !strings.Contains(res.Msg, s) {
			t.Fatalf("ADD without the driver rule: %q not in %+v", s, res)
		}
	}
	if strings.Contains(res.Msg, "arbitrary-node") || !strings.Contains(res.Details, "status.devices") {
		t.Errorf("the credential is on the claim's node, the rule alone is missing: %+v", res)
	}
	n.nothingWritten(a.pod, a.claim, a.dev)
}

// With the shipped RBAC, a token bound to a pod on another node than the claim's is
// refused (only "arbitrary-node" is tried for it) on 1.36+, and the CNI error says the
// credential is not on the claim's node.
func TestCNIClaimStatusOtherNodesToken(t *testing.T) {
	applyCNIRBAC(t)
	n := newCNINode(t)
	kc := writeKubeconfig(t, filepath.Join(n.dir, "other.kubeconfig"), podBoundToken(t, "devplumb-daemonset.yaml", "other-"+n.name))
	a := n.claimADD(kc)
	res := a.res
	if !granularClaimStatus(t) {
		n.acceptedThenDeleted(a)
		return
	}
	if res.Code != 106 || !strings.Contains(res.Msg, `resource "resourceclaims/driver"`) ||
		!strings.Contains(res.Msg, `tried only "arbitrary-node:patch"`) {
		t.Fatalf("ADD with another node's token: %+v", res)
	}
	n.nothingWritten(a.pod, a.claim, a.dev)
}

// acceptedThenDeleted checks, for an API server before 1.36, that the ADD wrote the
// claim's status and DEL removes it.
func (n *cniNode) acceptedThenDeleted(a *claimAttempt) {
	n.t.Helper()
	if a.res.Code != 0 || deviceStatus(n.t, a.claim, n.driver, "dev-0") == nil {
		n.t.Fatalf("ADD before 1.36, where resourceclaims/status is enough: %+v", a.res)
	}
	if res := n.run("DEL", a.conf, a.netns, a.pod, "net1"); res.Code != 0 || deviceStatus(n.t, a.claim, n.driver, "dev-0") != nil {
		n.t.Fatalf("DEL before 1.36: %+v", res)
	}
}
