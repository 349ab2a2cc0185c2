package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/kube"
)

// DefaultEventTimeout bounds the Event an ADD records on the pod. An Event
// is an explanation, not part of the attachment: the runtime waits for
// devplumb to exit, so it gets much less than the API server's writes that
// ADD needs (Plugin.Timeout).
const DefaultEventTimeout = 2 * time.Second

// EventKube is a Kube that can record Events on the pod; pkg/cni/kube's
// client is one. A Kube without it records none.
type EventKube interface {
	Kube
	RecordPodEvent(ctx context.Context, e kube.PodEvent) error
}

func (p *Plugin) eventTimeout() time.Duration {
	if p.EventTimeout > 0 {
		return p.EventTimeout
	}
	return DefaultEventTimeout
}

// recordAddEvent records, best-effort, the outcome of ADD as an Event on
// the pod, as config "events" asks: a failure (the default), every ADD, or
// none. rec is the attachment's record, nil if ADD took no device. It is
// the one place every ADD passes after newCall, so no failure path is
// missed; it never changes ADD's outcome, and returns within its bound
// even when the write does not.
func (c *call) recordAddEvent(rec *attachment.Record, err error) {
	ev, ok := c.addEvent(rec, err)
	if !ok {
		return
	}
	k, kerr := c.status.api.get()
	if kerr != nil || k == nil {
		return // no client: ADD said why already, if it needed one
	}
	ek, ok := k.(EventKube)
	if !ok {
		c.log.Debug("this Kubernetes client cannot record Events")
		return
	}
	bound := c.plugin.eventTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	// The write runs aside so that one that ignores ctx cannot hold ADD:
	// devplumb exits right after, ending a write left behind.
	done := make(chan error, 1)
	go func() { done <- ek.RecordPodEvent(ctx, ev) }()
	select {
	case werr := <-done:
		if werr != nil {
			c.log.Warn("cannot record the Event "+ev.Reason+" on pod "+c.pod.String()+" (events are best-effort)", "err", werr)
		}
	case <-ctx.Done():
		c.log.Warn(fmt.Sprintf("the Event %s on pod %s was not written within %s (events are best-effort)", ev.Reason, c.pod, bound))
	}
}

// addEvent is the Event ADD records, if any: the network, the interface,
// the device and, for a failure, the CNI error; for a success, the IPs as
// Multus's AddedInterface says them ("Add net1 [10.1.2.3] from ns/nad").
func (c *call) addEvent(rec *attachment.Record, err error) (kube.PodEvent, bool) {
	if c.conf.Kubeconfig == "" || !c.pod.Known() || c.conf.Events == config.EventsNone ||
		(err == nil && c.conf.Events != config.EventsAll) {
		return kube.PodEvent{}, false
	}
	device := "no device taken"
	if rec != nil {
		device = "device " + rec.DeviceID
	}
	e := kube.PodEvent{Namespace: c.pod.Namespace, Name: c.pod.Name, UID: c.pod.UID}
	if err != nil {
		e.Warning, e.Reason = true, kube.ReasonAttachmentFailed
		e.Note = fmt.Sprintf("network %s, interface %s, %s: %s", c.names.network(), c.args.IfName, device, errorText(err))
		return e, true
	}
	var ips []string
	if rec != nil && rec.NetworkStatus != nil {
		ips = rec.NetworkStatus.IPs
	}
	e.Reason = kube.ReasonAddedInterface
	e.Note = fmt.Sprintf("Add %s %v from %s (%s)", c.args.IfName, ips, c.names.network(), device)
	return e, true
}

// errorText is a CNI error as one line: what to fix, then the cause.
func errorText(err error) string {
	var te *types.Error
	if !errors.As(err, &te) {
		return err.Error()
	}
	if te.Details == "" {
		return te.Msg
	}
	return te.Msg + ": " + te.Details
}
