package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/dradevice"
	"github.com/devplumb/devplumb/pkg/cni/kube"
)

// statusWriter writes (step 6 of ADD) and removes (at DEL) devplumb's
// entries of one attachment on the API server: the pod's network-status
// entry and devplumb's part of a ResourceClaim's status.devices[] entry.
type statusWriter struct {
	api     *apiClient
	conf    *config.NetConf
	pod     attachment.Pod // from CNI_ARGS
	ifName  string
	timeout time.Duration
	log     *slog.Logger
	later   WriteQueue   // nil: removals happen before DEL returns
	spawn   func(func()) // Plugin.Go
}

func (w *statusWriter) ctx() (context.Context, context.CancelFunc) { return timeoutCtx(w.timeout) }

// failed applies networkStatus: "required" fails, "best-effort" logs.
func (w *statusWriter) failed(what string, err error) *types.Error {
	if w.conf.NetworkStatus == config.NetworkStatusBestEffort {
		w.log.Warn(what+" failed; continuing (networkStatus is best-effort)", "err", err)
		return nil
	}
	var perm *kube.PermissionError
	if errors.As(err, &perm) {
		// Name the rule itself: the API server's own words for the per-driver check of
		// claim status (1.36+) are a 422 "Invalid value" that does not read as a permission.
		return cniError(ErrKube, what+" failed: the user of kubeconfig "+w.conf.Kubeconfig+" lacks "+perm.Missing()+
			" (deployments/rbac.yaml grants it), or set \"networkStatus\": \"best-effort\"", err)
	}
	return cniError(ErrKube, what+" failed: check kubeconfig "+w.conf.Kubeconfig+
		" and the RBAC of its user, or set \"networkStatus\": \"best-effort\"", err)
}

// setPod adds or replaces the pod's network-status entry.
func (w *statusWriter) setPod(entry *nadv1.NetworkStatus) *types.Error {
	if w.conf.NetworkStatus == config.NetworkStatusNone {
		return nil // the caller writes the list (Multus)
	}
	k, err := w.api.get()
	if err != nil {
		return w.failed("building the Kubernetes client", err)
	}
	if k == nil {
		return nil
	}
	if !w.pod.Known() {
		return w.failed("writing network-status", errors.New("CNI_ARGS carry no K8S_POD_NAMESPACE/K8S_POD_NAME"))
	}
	ctx, cancel := w.ctx()
	defer cancel()
	if err := k.SetNetworkStatus(ctx, w.pod.Namespace, w.pod.Name, w.pod.UID, *entry); err != nil {
		return w.failed("writing network-status of pod "+w.pod.String(), err)
	}
	return nil
}

// podOf is the attachment's pod: CNI_ARGS', else rec's.
func (w *statusWriter) podOf(rec *attachment.Record) attachment.Pod {
	if !w.pod.Known() && rec != nil {
		return rec.Pod
	}
	return w.pod
}

// keys are what the attachment's network-status writes are ordered by in a
// WriteQueue: its pod.
func (w *statusWriter) keys(rec *attachment.Record) []string {
	return []string{"pod " + w.podOf(rec).String()}
}

// awaitLater waits for the network-status removals a WriteQueue holds for
// the attachment's pod, so that none lands after the entry an ADD writes
// next.
func (w *statusWriter) awaitLater(rec *attachment.Record) {
	if w.later == nil {
		return
	}
	ctx, cancel := w.ctx()
	defer cancel()
	w.later.Await(ctx, w.keys(rec))
}

// removeAll removes the attachment's entries on the API server (DEL's last
// step). The claim's goes first and before DEL answers: once the pod's
// sandboxes are gone the kubelet unprepares the claim and it is deallocated,
// and devplumb's entry must be gone by then. The pod's network-status entry
// goes with a WriteQueue after DEL has answered, else now; replaced reports
// that a later ADD of the same pod, network and interface holds it now (one
// the queue could not order: devplumb-direct while the agent held this
// removal), and then it stays.
func (w *statusWriter) removeAll(rec *attachment.Record, networks []string, replaced func() bool) {
	w.removeClaim(rec)
	later := func() { w.removePodUnless(rec, networks, replaced) }
	if w.later != nil && w.later.Defer(w.keys(rec), later) {
		return
	}
	w.removePod(rec, networks)
}

// removePod drops the attachment's network-status entry, under any of
// networks (the names it may have). The pod is CNI_ARGS', else rec's.
func (w *statusWriter) removePod(rec *attachment.Record, networks []string) {
	w.removePodUnless(rec, networks, nil)
}

// removePodUnless is removePod leaving the entry when keep reports a later
// ADD's (asked with each read of the pod).
func (w *statusWriter) removePodUnless(rec *attachment.Record, networks []string, keep func() bool) {
	if w.conf.NetworkStatus == config.NetworkStatusNone {
		return // not written at ADD; an entry of that name is the caller's
	}
	pod := w.podOf(rec)
	k, err := w.api.get()
	if err == nil && k == nil {
		return
	}
	if err == nil && !pod.Known() {
		err = errors.New("CNI_ARGS carry no K8S_POD_NAMESPACE/K8S_POD_NAME")
	}
	if err == nil {
		ctx, cancel := w.ctx()
		defer cancel()
		for _, network := range networks {
			if err = k.RemoveNetworkStatusUnless(ctx, pod.Namespace, pod.Name, pod.UID, network, w.ifName, keep); err != nil {
				break
			}
		}
	}
	if err != nil {
		// DEL must not fail on the API server: the pod may be gone already.
		w.log.Warn(fmt.Sprintf("removing network-status of pod %s failed", pod), "err", err)
	}
}

// setAll writes the pod's network-status entry and, for a DRA device, the
// claim's networkData, the two round trips at once; when one fails the
// other's entry is removed again, so a failed ADD leaves neither.
func (w *statusWriter) setAll(rec *attachment.Record, entry *nadv1.NetworkStatus, result types.Result) *types.Error {
	if rec.Claim == nil {
		return w.setPod(entry)
	}
	if _, err := w.api.get(); err != nil { // built once, before the two share it
		return w.failed("building the Kubernetes client", err)
	}
	claimDone := make(chan *types.Error, 1)
	aside(w.spawn, func() { claimDone <- w.setClaim(rec, entry, result) })
	podErr := w.setPod(entry)
	claimErr := <-claimDone
	switch {
	case claimErr != nil && podErr == nil:
		w.removePod(rec, []string{entry.Name})
		return claimErr
	case podErr != nil && claimErr == nil:
		w.removeClaim(rec)
	case claimErr != nil:
		return claimErr
	}
	return podErr
}

// setAllAsync starts setAll on a copy of rec (the caller goes on writing
// the record) and returns the wait for its outcome, to be called once.
func (w *statusWriter) setAllAsync(rec attachment.Record, entry *nadv1.NetworkStatus, result types.Result) func() *types.Error {
	done := make(chan *types.Error, 1)
	aside(w.spawn, func() { done <- w.setAll(&rec, entry, result) })
	return func() *types.Error { return <-done }
}

// unsetAll removes what setAll wrote, for an ADD that failed after it,
// unless replaced reports that a later ADD of the pod (a newer sandbox that
// took the device over) holds the entries now.
func (w *statusWriter) unsetAll(rec *attachment.Record, entry *nadv1.NetworkStatus, replaced func() bool) {
	if replaced() {
		return
	}
	w.removeClaim(rec)
	w.removePodUnless(rec, []string{entry.Name}, replaced)
}

// setClaim writes devplumb's part of the claim's status.devices[] entry of
// the attachment's DRA device, if it has one; failures count as for
// network-status ("networkStatus": required or best-effort).
func (w *statusWriter) setClaim(rec *attachment.Record, entry *nadv1.NetworkStatus, result types.Result) *types.Error {
	if rec.Claim == nil {
		return nil
	}
	k, err := w.api.dra()
	if err != nil {
		return w.failed("building the Kubernetes client", err)
	}
	if k == nil {
		return nil
	}
	st := dradevice.Status{Claim: *rec.Claim, InterfaceName: entry.Interface, HardwareAddress: entry.Mac,
		IPs: cidrs(entry.IPs, result), Network: w.conf.Name}
	ctx, cancel := w.ctx()
	defer cancel()
	if err := k.ApplyDeviceStatus(ctx, st); err != nil {
		return w.failed("writing the status of "+rec.Claim.String(), err)
	}
	return nil
}

// removeClaim removes devplumb's part of the claim's entry; like
// network-status on DEL, a failure is logged, never fatal. It goes by the
// state record alone (no API read): a DEL without state knows no claim, and
// its entry then goes with the claim (a template's claim goes with the pod).
func (w *statusWriter) removeClaim(rec *attachment.Record) {
	if rec == nil || rec.Claim == nil {
		return
	}
	k, err := w.api.dra()
	if err == nil && k == nil {
		return
	}
	if err == nil {
		ctx, cancel := w.ctx()
		defer cancel()
		err = k.RemoveDeviceStatus(ctx, *rec.Claim)
	}
	if err != nil {
		w.log.Warn("removing devplumb's status of "+rec.Claim.String()+" failed", "err", err)
	}
}
