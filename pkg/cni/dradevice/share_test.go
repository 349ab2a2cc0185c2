package dradevice_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/cni/dradevice"
)

// sharedPod is extendedPod with its two results shares of ens2f0, as the
// scheduler allocates a shareable device: a share ID and the capacity each
// consumed (bandwidth "" leaves it out).
func sharedPod(bandwidth ...string) *objects {
	o := extendedPod(netdevAttrs(hostdev))
	results := o.claims["ns/"+extClaim].Status.Allocation.Devices.Results
	for i := range results {
		r := &results[i]
		r.Device = "ens2f0"
		id := types.UID([]string{"11111111-0000-4000-8000-000000000001", "11111111-0000-4000-8000-000000000002"}[i])
		r.ShareID = &id
		if bandwidth[i] != "" {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{netshare.CapBandwidth: resource.MustParse(bandwidth[i])}
		}
	}
	return o
}

// Each share of a device is a device of its own for devplumb: its ID is the
// share's, its claim names the share ID and the bandwidth it consumed.
func TestResolveShares(t *testing.T) {
	o := sharedPod("300M", "1G")
	devs, err := dradevice.Resolve(context.Background(), o, dradevice.Query{Namespace: "ns", Pod: "p", ResourceName: hostdev})
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 {
		t.Fatalf("devices %v, want the two shares", ids(devs))
	}
	for i, want := range []struct {
		share string
		bw    int64
	}{{"11111111-0000-4000-8000-000000000001", 300 * netshare.Mbit}, {"11111111-0000-4000-8000-000000000002", 1000 * netshare.Mbit}} {
		d := devs[i]
		if d.ID != netshare.DeviceID("ens2f0", want.share) || d.Claim.ShareID != want.share || d.Claim.Bandwidth != want.bw {
			t.Errorf("device %d: %+v, want share %s at %d bit/s", i, d, want.share, want.bw)
		}
		if netshare.ParentID(d.ID, d.Claim.ShareID) != "ens2f0" {
			t.Errorf("device %d: parent of %s is %s", i, d.ID, netshare.ParentID(d.ID, d.Claim.ShareID))
		}
	}
}

// A share devplumb cannot shape is no device for it, and the error names
// the claim, the share and what is wrong.
func TestResolveShareErrors(t *testing.T) {
	for _, tc := range []struct {
		bw   []string
		want string
	}{
		{[]string{"", "1G"}, `consumed no "bandwidth" capacity`},
		{[]string{"100Mi", "1G"}, "bandwidth 100Mi is not a whole number of Mbit/s"},
		{[]string{"5T", "1G"}, "more than the kernel's traffic shaper can enforce"},
	} {
		_, err := dradevice.Resolve(context.Background(), sharedPod(tc.bw...), dradevice.Query{Namespace: "ns", Pod: "p", ResourceName: hostdev})
		if !errors.Is(err, dradevice.ErrNoDevice) || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), "share 11111111-0000-4000-8000-000000000001") {
			t.Errorf("bandwidth %v: %v, want ErrNoDevice naming the share with %q", tc.bw, err, tc.want)
		}
	}
	// Another resource's share is not devplumb's business.
	o := sharedPod("", "")
	if devs, err := dradevice.Resolve(context.Background(), o, dradevice.Query{Namespace: "ns", Pod: "p", ResourceName: "example.com/other"}); err != nil || len(devs) != 0 {
		t.Errorf("another resource's shares: %v, %v", ids(devs), err)
	}
}
