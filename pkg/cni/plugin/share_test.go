package plugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/base/netshare"
)

// A share found by the local path (the kubelet reports its CDI device, with
// resourceName alone) has no claim to read its bandwidth from: ADD fails
// naming the fix, and takes nothing.
func TestShareNeedsItsClaim(t *testing.T) {
	id := netshare.DeviceID("ens1f0", "5c0f0c4e-0000-4000-8000-000000000001")
	k, _ := draEnv(t, "example.com/vf="+id)
	err := k.p.Add(k.args())
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrNoDevice || !strings.Contains(te.Msg, "device "+id+" is a share of a shared device") ||
		!strings.Contains(te.Msg, `"resourceClaim"`) {
		t.Fatalf("ADD: %v", err)
	}
	if recs := k.records(); len(recs) != 0 {
		t.Errorf("state after a failed ADD: %+v", recs)
	}
}
