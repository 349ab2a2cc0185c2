package kubeletsim

import (
	"context"
	"slices"
	"time"
)

// DefaultWipeDelay is how long after a DRA driver deregistered the kubelet
// deletes its ResourceSlices of the node, unless it registers again first
// (pkg/kubelet/cm/dra: defaultWipingDelay): a driver that is gone must not
// keep pods coming to a node where nothing prepares their claims.
const DefaultWipeDelay = 30 * time.Second

// driverPoll is how often the registered drivers are looked at, as the
// kubelet's plugin reconciler runs once a second.
const driverPoll = time.Second

// watchDrivers wipes, delay after a driver deregistered and unless it came
// back, its ResourceSlices of the node, until the node stops.
func (n *Node) watchDrivers(delay time.Duration) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		tick := time.NewTicker(driverPoll)
		defer tick.Stop()
		var registered []string
		pending := map[string]*time.Timer{}
		defer func() {
			for _, t := range pending {
				t.Stop()
			}
		}()
		for {
			now := n.registeredDrivers()
			for _, d := range registered {
				if !slices.Contains(now, d) && pending[d] == nil {
					n.log.Info("DRA driver deregistered: its ResourceSlices go unless it comes back", "driver", d, "delay", delay)
					pending[d] = time.AfterFunc(delay, func() { n.wipeSlices(d) })
				}
			}
			for _, d := range now {
				if t := pending[d]; t != nil {
					t.Stop()
					delete(pending, d)
				}
			}
			registered = now
			select {
			case <-n.ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

func (n *Node) registeredDrivers() []string {
	var out []string
	for _, p := range n.DRADrivers() {
		out = append(out, p.Driver)
	}
	return out
}

// wipeSlices deletes the driver's ResourceSlices of the node, unless it
// registered again in the meantime.
func (n *Node) wipeSlices(driver string) {
	if slices.Contains(n.registeredDrivers(), driver) || n.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, registerNodeTimeout)
	defer cancel()
	if err := n.cluster.DeleteSlices(ctx, driver); err != nil {
		n.log.Error("Deleting a deregistered DRA driver's ResourceSlices failed", "driver", driver, "err", err)
		return
	}
	n.log.Info("Deleted the ResourceSlices of a deregistered DRA driver", "driver", driver)
}
