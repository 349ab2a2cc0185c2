package deployments

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The node policies hold only for a credential that carries its node: each applies to
// exactly the service account of its DaemonSet, whose pod keeps the projected token
// (the node comes with it), is bound with Deny, and fails closed. On the real API server
// e2e/dra/node_policy_test.go checks what they allow.
func TestNodePoliciesBindTheDaemonSetsTokens(t *testing.T) {
	for _, tc := range []struct {
		policyFile string
		policy     []runtime.Object
		daemonSet  []runtime.Object
	}{
		{"node-policy.yaml", decode(t)["node-policy.yaml"], decode(t)["devplumb-daemonset.yaml"]},
		{"dra/node-policy.yaml", draObjects[runtime.Object](decodeDRA(t)), draObjects[runtime.Object](decodeDRA(t))},
	} {
		ds := daemonSet(t, tc.daemonSet)
		spec := ds.Spec.Template.Spec
		user := "system:serviceaccount:" + ds.Namespace + ":" + spec.ServiceAccountName
		if spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken {
			t.Errorf("%s: DaemonSet %s does not mount its token", tc.policyFile, ds.Name)
		}
		checkPolicyFor(t, tc.policyFile, tc.policy, user)
	}
	for _, o := range decode(t)["rbac.yaml"] {
		if sa, ok := o.(*corev1.ServiceAccount); ok && sa.AutomountServiceAccountToken != nil && !*sa.AutomountServiceAccountToken {
			t.Errorf("ServiceAccount %s does not mount its token", sa.Name)
		}
	}
}

func checkPolicyFor(t *testing.T, file string, objs []runtime.Object, user string) {
	t.Helper()
	policies := draObjects[*admissionv1.ValidatingAdmissionPolicy](objs)
	bindings := draObjects[*admissionv1.ValidatingAdmissionPolicyBinding](objs)
	if len(policies) != 1 || len(bindings) != 1 {
		t.Fatalf("%s: %d policies, %d bindings, want one each", file, len(policies), len(bindings))
	}
	p, b := policies[0], bindings[0]
	if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != "request.userInfo.username == '"+user+"'" {
		t.Errorf("%s: policy %s does not apply to exactly %s: %+v", file, p.Name, user, p.Spec.MatchConditions)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("%s: policy %s does not fail closed", file, p.Name)
	}
	if b.Spec.PolicyName != p.Name || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionv1.Deny ||
		b.Spec.MatchResources != nil || b.Spec.ParamRef != nil {
		t.Errorf("%s: binding %+v does not deny for %s everywhere", file, b.Spec, p.Name)
	}
	for _, v := range p.Spec.Variables {
		if v.Name == "node" && !strings.Contains(v.Expression, "authentication.kubernetes.io/node-name") {
			t.Errorf("%s: the node is not the token's: %s", file, v.Expression)
		}
	}
}
