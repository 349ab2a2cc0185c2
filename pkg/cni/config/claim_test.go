package config

import (
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// kubeNode is a node config with a kubeconfig: a claim is read through it.
var kubeNode = &nodeconfig.Node{Kubeconfig: "/etc/k"}

func claimConf(extra string) string {
	return `{"cniVersion":"1.0.0","name":"n","type":"devplumb","delegate":{"type":"host-device"}` + extra + `}`
}

func TestParseResourceClaim(t *testing.T) {
	c, err := Parse([]byte(claimConf(`,"resourceClaim":"net-a","request":"vf/fast","runtimeConfig":{"deviceID":"0000:01:00.1"}`)), kubeNode)
	if err != nil {
		t.Fatal(err)
	}
	if c.ResourceClaim != "net-a" || c.Request != "vf/fast" {
		t.Errorf("claim %q request %q", c.ResourceClaim, c.Request)
	}
	// The claim names the device: a caller's deviceID (Multus) does not bypass it.
	if got := c.DeviceIDFromConfig(); got != "" {
		t.Errorf("DeviceIDFromConfig with resourceClaim = %q, want none", got)
	}
	// resourceName beside resourceClaim narrows the claim's devices.
	if _, err := Parse([]byte(claimConf(`,"resourceClaim":"a","resourceName":"example.com/vf"`)), kubeNode); err != nil {
		t.Error(err)
	}
}

func TestParseResourceClaimErrors(t *testing.T) {
	for _, tc := range []struct{ name, conf, want string }{
		{"not a label", claimConf(`,"resourceClaim":"Net_A"`), `"resourceClaim" "Net_A" must be the claim's name in the pod spec`},
		{"too long", claimConf(`,"resourceClaim":"` + strings.Repeat("a", 64) + `"`), `"resourceClaim"`},
		{"request alone", claimConf(`,"request":"vf"`), `"request" "vf" needs "resourceClaim"`},
		{"bad request", claimConf(`,"resourceClaim":"a","request":"a/b/c"`), `"request" "a/b/c" must name a request`},
		{"bad request case", claimConf(`,"resourceClaim":"a","request":"VF"`), `"request" "VF"`},
		{"no kubeconfig", `{"cniVersion":"1.0.0","name":"n","type":"devplumb","resourceClaim":"a","delegate":{"type":"x"}}`,
			`"resourceClaim" "a" needs a "kubeconfig" in the node config`},
		{"with deviceID", claimConf(`,"resourceClaim":"a","deviceID":"eth1"`), `"resourceClaim" and "deviceID"/"pciBusID" are both set`},
		{"wrong type", claimConf(`,"resourceClaim":1`), `key "resourceClaim" must be of type string`},
		{"typo", claimConf(`,"resourceClaims":"a"`), `unknown top-level key "resourceClaims"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := kubeNode
			if tc.name == "no kubeconfig" {
				node = nil
			}
			_, err := Parse([]byte(tc.conf), node)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
