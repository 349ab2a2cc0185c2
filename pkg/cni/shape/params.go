// Package shape holds a share of a shared NIC to its bandwidth on its
// interface in the pod's network namespace (docs/sharing.md).
//
// The bandwidth CNI plugin shapes the host end of a veth pair, which a
// macvlan has not, so devplumb does what it does on the pod's side instead,
// with the directions swapped: what the pod sends leaves through a tbf root
// qdisc on the interface itself, and what it receives is redirected by an
// ingress qdisc (a u32 filter matching everything, mirred egress redirect)
// to an ifb link of its own in the pod's netns, whose tbf root qdisc holds
// it to the same rate. A pod without CAP_NET_ADMIN can change neither.
//
// It imports only the netlink library and the standard library: the CNI
// entry point, which runs the delegates when the node agent serves a call,
// links it.
package shape

import (
	"fmt"
	"math"
	"time"
)

// Spec is a share to shape: its name for errors and its rate.
type Spec struct {
	// Share names the share in errors: its claim and share ID.
	Share string `json:"share"`
	// Rate is the share's consumed bandwidth in bit/s, both ways.
	Rate uint64 `json:"rate"`
}

// latency is how long a packet may wait in a tbf's queue, which sizes the
// queue (its limit) with the burst: the bandwidth plugin's 25 ms.
const latency = 25 * time.Millisecond

// burstTime is the burst a share may send at line rate: 10 ms of its rate.
// The bandwidth plugin takes a burst from its config; a share has none, and
// 10 ms of the rate keeps a TCP flow's window moving without letting a pod
// exceed its rate for long.
const burstTime = 10 * time.Millisecond

// minBurst is the smallest burst: one 64 KiB GSO packet passes whole (tbf
// segments or drops packets larger than its burst).
const minBurst = 64 << 10

// maxBurstTime is the longest burst tbf keeps: the kernel holds it in ns in
// 32 bits and cuts a longer one.
const maxBurstTime = time.Duration(math.MaxUint32)

// tbf is one tbf qdisc's parameters as netlink takes them.
type tbf struct {
	rate   uint64 // byte/s
	burst  uint64 // bytes
	limit  uint32 // bytes queued at most: rate × latency + burst
	buffer uint32 // the burst in psched ticks
}

// params are the tbf parameters of rate (bit/s), or an error saying what
// of tbf cannot hold it: a rate under one byte a second, a queue (limit)
// past tbf's 32 bits, a burst longer than the kernel keeps.
func params(rate uint64) (*tbf, error) {
	t := &tbf{rate: rate / 8}
	if t.rate == 0 {
		return nil, fmt.Errorf("rate %d bit/s: tbf shapes at whole bytes a second, at least 8 bit/s", rate)
	}
	queue := mulDur(t.rate, latency)
	if queue > math.MaxUint32-minBurst {
		return nil, fmt.Errorf("rate %d bit/s: tbf's queue (%v of the rate and a burst) is more than its 32-bit limit holds",
			rate, latency)
	}
	// The burst is cut where the queue would pass 32 bits (rates near the top).
	t.burst = min(max(mulDur(t.rate, burstTime), minBurst), math.MaxUint32-queue)
	t.limit = uint32(queue + t.burst)
	held := time.Duration(float64(t.burst) / float64(t.rate) * float64(time.Second))
	if held > maxBurstTime {
		return nil, fmt.Errorf("rate %d bit/s: a %d-byte burst lasts %v at it, longer than tbf keeps (%v)", rate, t.burst, held, maxBurstTime)
	}
	t.buffer = uint32(float64(held.Microseconds()) * tickInUsec())
	return t, nil
}

// mulDur is rate (byte/s) over d, in bytes, saturating.
func mulDur(rate uint64, d time.Duration) uint64 {
	if rate > math.MaxUint64/uint64(d) {
		return math.MaxUint64
	}
	return rate * uint64(d) / uint64(time.Second)
}

// Check says whether the kernel can shape s: an error names the share and
// its rate. It runs before the delegates, so a share that cannot be
// shaped takes nothing.
func Check(s Spec) error {
	if _, err := params(s.Rate); err != nil {
		return fmt.Errorf("%s: bandwidth %d bit/s cannot be enforced: %w", s.Share, s.Rate, err)
	}
	return nil
}
