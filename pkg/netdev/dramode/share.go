package dramode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// A shareable resource (config "share") publishes each device once with
// allowMultipleAllocations and two consumable capacities (KEP-5075): the
// scheduler hands out shares of it, each with a share ID and the bandwidth
// it consumed, and never more than the device has. Prepare of a share
// (sharePrepared) writes the share's own CDI device and device-info.

// shareCapacity makes dev shareable under policy p: it reads the link's
// speed for a policy without a total, and refuses a total the link cannot
// carry. why says what keeps the device out of the slice.
func shareCapacity(dev *resourceapi.Device, p *netshare.Policy, sysfsRoot, ifName string) (why string) {
	if ifName == "" {
		return "it is shareable but has no netdev (a share is a macvlan sub-interface of it)"
	}
	speed := linkSpeed(sysfsRoot, ifName)
	total := p.Total
	switch {
	case total == 0 && speed == 0:
		return fmt.Sprintf("its link %s reports no speed: set share.bandwidth.total", ifName)
	case total == 0:
		total = speed
	case speed > 0 && total > speed:
		return fmt.Sprintf("share.bandwidth.total %s is more than its link %s carries (%s): the kernel cannot enforce it",
			netshare.Format(total), ifName, netshare.Format(speed))
	}
	maxShare := min(p.Max, total)
	if maxShare == 0 {
		maxShare = total
	}
	if p.Default > maxShare {
		return fmt.Sprintf("share.bandwidth.default %s is more than its bandwidth %s", netshare.Format(p.Default), netshare.Format(total))
	}
	q := func(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.DecimalSI) }
	dev.AllowMultipleAllocations = ptr.To(true)
	dev.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		netshare.CapBandwidth: {Value: *q(total), RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    q(p.Default),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q(p.Min), Max: q(maxShare), Step: q(p.Step)},
		}},
		netshare.CapInterfaces: {Value: *q(p.Interfaces), RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default: q(1), ValidValues: []resource.Quantity{*q(1)},
		}},
	}
	return ""
}

// linkSpeed is a link's speed in bit/s from sysfs (Mbit/s there); 0 when
// the link reports none (-1, or no file: down, or a virtual link).
func linkSpeed(sysfsRoot, ifName string) int64 {
	data, err := os.ReadFile(filepath.Join(sysfsRoot, "class", "net", ifName, "speed"))
	if err != nil {
		return 0
	}
	mbit, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || mbit <= 0 || mbit > netshare.MaxRate/netshare.Mbit {
		return 0
	}
	return mbit * netshare.Mbit
}

// shareIfName is the netdev a shareable device's shares sit on: a netdev
// resource's device is one; a PCI function's is in its attributes.
func shareIfName(driver, kind string, d source.Device, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) string {
	if kind == "netdevs" {
		return d.ID
	}
	if a, ok := attrs[resourceapi.QualifiedName(driver+"/"+AttrInterfaceName)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// share is what a prepared share adds to its device: its parent and the
// scheduler's decision.
type share struct {
	ID        string `json:"id"`        // the allocation's share ID
	Parent    string `json:"parent"`    // the parent device's ID
	Interface string `json:"interface"` // the parent's netdev
	Bandwidth int64  `json:"bandwidth"` // bit/s, as consumed
}

// shareIDRE is what a share ID may be to name files: the scheduler makes
// UUIDs.
var shareIDRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$`)

// sharePrepared is a share of a shareable device as allocated in r: its own
// device (ID netshare.DeviceID), with the parent's device-info (a PCI
// function's; a netdev has no device-info type) and the share's parent, ID
// and bandwidth in its CDI device's environment.
func (d *Driver) sharePrepared(r resourceapi.DeviceRequestAllocationResult, e entry) (preparedDevice, error) {
	if r.ShareID == nil {
		return preparedDevice{}, errors.New("it is shareable, but its allocation has no share ID: " +
			"the scheduler allocated it whole (is the DRAConsumableCapacity feature off in kube-scheduler or the API server?)")
	}
	sid := string(*r.ShareID)
	if !shareIDRE.MatchString(sid) {
		return preparedDevice{}, fmt.Errorf("share ID %q cannot name a device (lower-case letters, digits and - only)", sid)
	}
	q, ok := r.ConsumedCapacity[netshare.CapBandwidth]
	if !ok {
		return preparedDevice{}, fmt.Errorf("share %s consumed no %s capacity", sid, netshare.CapBandwidth)
	}
	bw, err := netshare.Rate(q)
	if err != nil {
		return preparedDevice{}, fmt.Errorf("share %s: %w", sid, err)
	}
	attrs, _ := attributes(d.name, e.res.name, e.res.source.Kind(), d.sysfs, e.dev)
	sh := &share{ID: sid, Parent: e.dev.ID, Interface: shareIfName(d.name, e.res.source.Kind(), e.dev, attrs), Bandwidth: bw}
	dev := source.Device{Info: e.dev.Info, Env: sh.env(cdispec.EnvName(e.res.name, netshare.DeviceID(e.dev.ID, sid)))}
	dev.ID, dev.Healthy, dev.NUMANode = netshare.DeviceID(e.dev.ID, sid), true, e.dev.NUMANode
	return preparedDevice{
		Requests: []string{r.Request}, Pool: r.Pool, Name: r.Device,
		Resource: e.res.name, CDI: e.res.cdi.QualifiedName(dev.ID), Device: dev, Share: sh,
	}, nil
}

// env tells the container which share it got: prefix is its CDI device's
// own variable.
func (s *share) env(prefix string) []string {
	return []string{
		prefix + "_PARENT=" + s.Parent,
		prefix + "_INTERFACE=" + s.Interface,
		prefix + "_SHARE_ID=" + s.ID,
		prefix + "_BANDWIDTH=" + strconv.FormatInt(s.Bandwidth, 10),
	}
}

// uid is the share ID the kubelet matches a prepared device by; nil for a
// whole device.
func (s *share) uid() *types.UID {
	if s == nil {
		return nil
	}
	id := types.UID(s.ID)
	return &id
}
