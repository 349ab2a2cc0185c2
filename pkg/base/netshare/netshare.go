// Package netshare is the vocabulary of a shared network device (KEP-5075
// consumable capacity) that netdev-dp's DRA mode publishes and prepares and
// devplumb attaches: the capacity names, the bandwidth unit and its checks,
// a shareable resource's config, and the ID a share goes by.
//
// Bandwidth is a Kubernetes quantity in bits per second with decimal
// suffixes, as the pod annotations kubernetes.io/ingress-bandwidth and
// kubernetes.io/egress-bandwidth have it: "100M" is 100 Mbit/s. It is
// counted in whole Mbit/s (a link's speed in sysfs is in Mbit/s).
package netshare

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The capacities a shareable device publishes, without the driver's domain
// (Kubernetes 1.38's slice publishing helper rejects names qualified with
// the driver's own domain; a request names them the same way).
const (
	CapBandwidth  = "bandwidth"  // bit/s; each share consumes what it asks for
	CapInterfaces = "interfaces" // sub-interfaces; each share consumes one
)

// Mbit is the unit bandwidth is counted in.
const Mbit = 1_000_000

// MaxRate is the highest rate a share may have: devplumb shapes a share
// with tbf (pkg/cni/shape), whose queue (the rate × 25 ms and a burst, in
// bytes) is a 32-bit number, which holds about 1.37 Tbit/s; pkg/cni/shape's
// test keeps MaxRate inside it.
const MaxRate = 1_000_000 * Mbit

// MaxInterfaces bounds a device's shares: each is a macvlan sub-interface,
// and a macvlan parent has at most a few thousand in practice.
const MaxInterfaces = 4096

// Config makes a resource shareable: each of its devices is published once,
// allocatable to many claims, with the bandwidth and interfaces capacities.
type Config struct {
	// Interfaces is how many shares (sub-interfaces) a device takes.
	Interfaces int64     `json:"interfaces"`
	Bandwidth  Bandwidth `json:"bandwidth"`
}

// Bandwidth is how a device's bandwidth is shared, each a quantity in bit/s.
type Bandwidth struct {
	// Total is the device's bandwidth; "" takes the link's speed.
	Total string `json:"total,omitempty"`
	// Default is what a share that asks for no bandwidth gets.
	Default string `json:"default"`
	// Step is the granularity of a share's bandwidth (default "1M"): a
	// request is rounded up to a multiple of it.
	Step string `json:"step,omitempty"`
	// Min and Max bound one share (defaults: Step and the total).
	Min string `json:"min,omitempty"`
	Max string `json:"max,omitempty"`
}

// Policy is a checked Bandwidth, in bit/s; Total 0 is the link's speed.
type Policy struct {
	Interfaces                     int64
	Total, Default, Step, Min, Max int64
}

// Validate checks c and returns its policy.
func (c *Config) Validate() (*Policy, error) {
	if c.Interfaces < 1 || c.Interfaces > MaxInterfaces {
		return nil, fmt.Errorf("share.interfaces %d: give how many shares a device takes, 1 to %d", c.Interfaces, MaxInterfaces)
	}
	p := &Policy{Interfaces: c.Interfaces, Step: Mbit}
	b := c.Bandwidth
	for _, f := range []struct {
		name, value string
		to          *int64
		required    bool
	}{
		{"total", b.Total, &p.Total, false}, {"default", b.Default, &p.Default, true},
		{"step", b.Step, &p.Step, false}, {"min", b.Min, &p.Min, false}, {"max", b.Max, &p.Max, false},
	} {
		if f.value == "" {
			if f.required {
				return nil, fmt.Errorf("share.bandwidth.%s is required: the bandwidth a share gets when it asks for none, e.g. \"100M\"", f.name)
			}
			continue
		}
		v, err := ParseBandwidth(f.value)
		if err != nil {
			return nil, fmt.Errorf("share.bandwidth.%s: %w", f.name, err)
		}
		*f.to = v
	}
	return p, p.check()
}

// check relates the policy's numbers to each other; Max and Min default here.
func (p *Policy) check() error {
	if p.Min == 0 {
		p.Min = p.Step
	}
	if p.Max == 0 {
		p.Max = p.Total
	}
	switch {
	case p.Min%p.Step != 0:
		return fmt.Errorf("share.bandwidth.min %s is not a multiple of step %s", Format(p.Min), Format(p.Step))
	case p.Default < p.Min || (p.Max > 0 && p.Default > p.Max):
		return fmt.Errorf("share.bandwidth.default %s is outside min %s and max %s", Format(p.Default), Format(p.Min), Format(p.Max))
	case p.Default%p.Step != 0:
		return fmt.Errorf("share.bandwidth.default %s is not a multiple of step %s", Format(p.Default), Format(p.Step))
	case p.Total > 0 && p.Max > p.Total:
		return fmt.Errorf("share.bandwidth.max %s is more than the total %s", Format(p.Max), Format(p.Total))
	}
	return nil
}

// ParseBandwidth reads a bandwidth quantity: decimal bit/s, whole Mbit/s,
// positive, at most MaxRate. Each wrong unit is named.
func ParseBandwidth(s string) (int64, error) {
	for _, bad := range []string{"bit", "bps", "b/s", "B"} {
		if strings.HasSuffix(s, bad) {
			return 0, fmt.Errorf("bandwidth %q: write a quantity in bit/s without a unit, e.g. \"100M\" for 100 Mbit/s", s)
		}
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("bandwidth %q is not a quantity (bit/s, e.g. \"100M\", \"10G\"): %w", s, err)
	}
	if q.Format == resource.BinarySI {
		return 0, fmt.Errorf("bandwidth %q has a binary suffix (Ki, Mi, Gi): bandwidth is in bit/s with decimal suffixes (k, M, G)", s)
	}
	return checkRate(s, q)
}

// checkRate checks a quantity as a rate: whole Mbit/s, 1M to MaxRate.
func checkRate(what string, q resource.Quantity) (int64, error) {
	if q.Cmp(*resource.NewQuantity(MaxRate, resource.DecimalSI)) > 0 {
		return 0, fmt.Errorf("bandwidth %s is more than the kernel's traffic shaper can enforce (at most %s)", what, Format(MaxRate))
	}
	v, exact := q.AsInt64()
	if !exact || v < Mbit || v%Mbit != 0 {
		return 0, fmt.Errorf("bandwidth %s is not a whole number of Mbit/s (bit/s: \"100M\" is 100 Mbit/s, \"1G\" 1 Gbit/s)", what)
	}
	return v, nil
}

// Rate checks a share's consumed bandwidth as the scheduler recorded it.
func Rate(q resource.Quantity) (int64, error) { return checkRate(q.String(), q) }

// Format writes bit/s as a quantity ("100M").
func Format(bits int64) string {
	return resource.NewQuantity(bits, resource.DecimalSI).String()
}

// DeviceID is the ID a share of device parent goes by in its DP
// device-info file, its CDI device and devplumb's records.
func DeviceID(parent, shareID string) string { return parent + shareSep + shareID }

// shareSep joins a share's parent and share ID in its device ID.
const shareSep = "_share_"

// ParentID is the parent's ID in a share's device ID made by DeviceID.
func ParentID(deviceID, shareID string) string { return strings.TrimSuffix(deviceID, shareSep+shareID) }

// IsDeviceID says whether id has the form DeviceID gives a share.
func IsDeviceID(id string) bool { return strings.Contains(id, shareSep) }

// CounterBandwidth is the counter a PF's bandwidth is published as
// (KEP-4815 partitionable devices), which its VFs consume.
const CounterBandwidth = "bandwidth"

// PFBandwidth has the VFs of a PF share its bandwidth: the PF's is a
// shared counter of the slice, and each VF consumes PerVF of it, so the
// scheduler never gives away more VF bandwidth than the PF has.
type PFBandwidth struct {
	// Total is each PF's bandwidth; "" takes the PF link's speed.
	Total string `json:"total,omitempty"`
	// PerVF is what each VF consumes of it: the VF's rate limit.
	PerVF string `json:"perVF"`
}

// Validate checks b and returns its numbers in bit/s (total 0: the link's speed).
func (b *PFBandwidth) Validate() (total, perVF int64, err error) {
	if b.PerVF == "" {
		return 0, 0, fmt.Errorf("pfBandwidth.perVF is required: what each VF consumes of its PF's bandwidth, e.g. \"5G\"")
	}
	if perVF, err = ParseBandwidth(b.PerVF); err != nil {
		return 0, 0, fmt.Errorf("pfBandwidth.perVF: %w", err)
	}
	if b.Total != "" {
		if total, err = ParseBandwidth(b.Total); err != nil {
			return 0, 0, fmt.Errorf("pfBandwidth.total: %w", err)
		}
		if perVF > total {
			return 0, 0, fmt.Errorf("pfBandwidth.perVF %s is more than the total %s: no VF could be allocated", b.PerVF, b.Total)
		}
	}
	return total, perVF, nil
}
