package dradevice

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/devplumb/devplumb/pkg/base/netshare"
)

// claimOf names one allocation result of claim. A share of a device many
// claims share (KEP-5075) carries its share ID and the bandwidth it
// consumed, which devplumb shapes the share's interface to: a share
// without a bandwidth devplumb can enforce is no device for it.
func claimOf(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult) (Claim, error) {
	c := Claim{Namespace: claim.Namespace, Name: claim.Name, Driver: res.Driver, Pool: res.Pool, Device: res.Device, Request: res.Request}
	if res.ShareID == nil {
		return c, nil
	}
	c.ShareID = string(*res.ShareID)
	q, ok := res.ConsumedCapacity[netshare.CapBandwidth]
	if !ok {
		return c, fmt.Errorf("%w: %s consumed no %q capacity: devplumb attaches a share at the bandwidth it consumed "+
			"(is the driver's device published with a %q capacity?)", ErrNoDevice, c, netshare.CapBandwidth, netshare.CapBandwidth)
	}
	bw, err := netshare.Rate(q)
	if err != nil {
		return c, fmt.Errorf("%w: %s: %w", ErrNoDevice, c, err)
	}
	c.Bandwidth = bw
	return c, nil
}
