package adapter

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// allocate runs ADD for one container's slots. The kubelet only hands out
// slots it holds free, so an allocation still holding one of them belongs
// to a pod that is gone: it is DELeted first. The request ID is recorded
// before ADD runs, so that a crash in between still leads to its DEL.
func (r *resource) allocate(ctx context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.freeStaleLocked(ctx, ids)
	reqID := newRequestID()
	a := &allocation{Slots: ids, Created: time.Now()}
	r.allocs[reqID] = a
	if err := r.state.save(r.allocs); err != nil {
		delete(r.allocs, reqID)
		return nil, err
	}
	reply, err := r.bin.Add(ctx, r.version, []protocol.Amount{{Spec: r.typ, Amount: int64(len(ids))}}, reqID, nil)
	if err == nil {
		a.Devices = reply.Devices
		if err = r.state.save(r.allocs); err == nil {
			err = r.writeSpecLocked()
		}
	}
	if err != nil {
		// ADD fails whole, but a binary killed by a timeout may have
		// claimed: DEL never fails and frees whatever it holds.
		r.abandonLocked(context.WithoutCancel(ctx), reqID)
		r.refreshLocked(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("ADD %s (request ID %s): %w", r.typ, reqID, err)
	}
	r.log.Info("allocated", "slots", ids, "requestID", reqID, "devices", reply.Devices)
	r.refreshLocked(ctx)
	return r.response(reqID, reply.Devices)
}

// freeStaleLocked DELs the allocations still holding any of ids.
func (r *resource) freeStaleLocked(ctx context.Context, ids []string) {
	for _, id := range ids {
		if owner := r.ownerLocked(id); owner != "" {
			r.log.Info("slot handed out again: its old allocation is stale", "slot", id, "requestID", owner)
			r.abandonLocked(ctx, owner)
		}
	}
}

// abandonLocked DELs an allocation no container holds. Should the DEL not
// go through, the record stays without slots (they may be another's now)
// and the next reconcile tries again.
func (r *resource) abandonLocked(ctx context.Context, reqID string) {
	if r.delLocked(ctx, reqID) {
		return
	}
	a := r.allocs[reqID]
	a.Slots, a.Seen = nil, true
	if err := r.state.save(r.allocs); err != nil {
		r.log.Error("saving state", "err", err)
	}
}

// ownerLocked is the request ID holding a slot, or "".
func (r *resource) ownerLocked(slot string) string {
	for id, a := range r.allocs {
		for _, s := range a.Slots {
			if s == slot {
				return id
			}
		}
	}
	return ""
}

// delLocked runs DEL and forgets the allocation. DEL must not fail: an
// error reply (such as 5, unknown request ID) is only logged. When the
// binary cannot be run or breaks the draft, the allocation is kept and the
// next reconcile tries again; it reports whether the DEL went through.
func (r *resource) delLocked(ctx context.Context, reqID string) bool {
	var slots []string
	if a := r.allocs[reqID]; a != nil {
		slots = a.Slots
	}
	logged, err := r.bin.Del(ctx, r.version, reqID)
	switch {
	case err != nil:
		r.log.Error("DEL failed; trying again at the next poll", "requestID", reqID, "err", err)
		return false
	case logged != nil:
		r.log.Info("DEL answered with an error for the log", "requestID", reqID, "reply", logged.Error())
	default:
		r.log.Info("freed", "requestID", reqID, "slots", slots)
	}
	delete(r.allocs, reqID)
	if err := r.state.save(r.allocs); err != nil {
		r.log.Error("saving state after DEL", "err", err)
	}
	if err := r.writeSpecLocked(); err != nil {
		r.log.Error("writing CDI spec after DEL", "err", err)
	}
	return true
}

// response names the CDI device of the request (cdi_devices and the
// cdi.k8s.io annotation) and lists the device nodes as DeviceSpecs for
// runtimes without CDI.
func (r *resource) response(reqID string, devices []string) (*pluginapi.ContainerAllocateResponse, error) {
	name := r.cdi.QualifiedName(reqID)
	ann, err := cdi.UpdateAnnotations(nil, strings.ReplaceAll(r.name, "/", "_"), reqID, []string{name})
	if err != nil {
		return nil, fmt.Errorf("CDI annotation: %w", err)
	}
	resp := &pluginapi.ContainerAllocateResponse{
		CdiDevices:  []*pluginapi.CDIDevice{{Name: name}},
		Annotations: ann,
		Envs:        map[string]string{envName(r.typ): reqID},
	}
	for _, p := range uniq(devices) {
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{HostPath: p, ContainerPath: p, Permissions: "rw"})
	}
	return resp, nil
}

// envName tells the container its request ID: CDI_REQUEST_ID_<TYPE>.
func envName(typ string) string { return "CDI_REQUEST_ID_" + strings.ToUpper(typ) }
