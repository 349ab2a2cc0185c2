package kube

import (
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/dradevice"
)

// One field manager per device: readable when it fits the API server's 128
// characters, a hash when not, and never one for two devices.
func TestFieldManager(t *testing.T) {
	a := dradevice.Claim{Driver: "netdev.devplumb.io", Pool: "node-1", Device: "vf-1"}
	if got := FieldManager(a); got != "devplumb/netdev.devplumb.io/node-1/vf-1" {
		t.Errorf("FieldManager = %q", got)
	}
	b := a
	b.Device = "vf-2"
	if FieldManager(a) == FieldManager(b) {
		t.Error("two devices share a field manager")
	}
	long := a
	long.Pool = strings.Repeat("p", 200)
	long2 := long
	long2.Device = "vf-2"
	m := FieldManager(long)
	if len(m) > 128 || !strings.HasPrefix(m, "devplumb/") || m == FieldManager(long2) {
		t.Errorf("long names: %q (%d chars), other device %q", m, len(m), FieldManager(long2))
	}
}
