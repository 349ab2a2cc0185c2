package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/devplumb/devplumb/pkg/base/failpoint"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
	"github.com/devplumb/devplumb/pkg/cni/shape"
)

// ADD and DEL are each two steps around the delegates' run, so that the run
// can happen elsewhere: the node agent (issue 24) prepares and commits while
// the CNI entry point, in the runtime's context (its environment, netns and
// timeout), runs the delegates. Add and Del are the same two steps with the
// run in between, in this process.
//
// The rule for undoing a delegate ADD: whoever runs the delegates runs every
// delegate DEL too, and always before the step that frees the device, so a
// device is never handed to another attachment while a delegate still holds
// it. A failed delegate ADD is undone by its runner before CommitAdd; an ADD
// that CommitAdd fails after the delegates succeeded is undone by its runner
// before Rollback. No step here ever runs a delegate ADD or DEL.

// Delegate is the delegates' run a prepared call hands to its runner: the
// conflist with the device injected and libcni's runtime config (device ID
// and CNI device-info file among the capability arguments), as
// agentproto.Delegate carries them.
type Delegate struct {
	ConfList json.RawMessage    `json:"confList"`
	Runtime  libcni.RuntimeConf `json:"runtime"`
	// CacheDir is libcni's result cache of the network: a runner elsewhere
	// must keep results there, where DEL, CHECK and GC of either path look.
	CacheDir string `json:"cacheDir"`
	// Shape, for a share, is its rate, which the runner sets on the
	// interface (shape.Apply) once the delegates' ADD succeeded; a failure
	// there is undone as a failed delegate ADD, and reported with code
	// ErrShape. After every delegates' DEL (a DEL's, an ADD's undo) the
	// runner removes the share's ifb (shape.Remove).
	Shape *shape.Spec `json:"shape,omitempty"`
}

func newDelegate(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf, cacheDir string, spec *shape.Spec) *Delegate {
	return &Delegate{ConfList: list.Bytes, Runtime: *rt, CacheDir: cacheDir, Shape: spec}
}

// Conf is the delegates' run as libcni takes it.
func (d *Delegate) Conf() (*libcni.NetworkConfigList, *libcni.RuntimeConf, error) {
	list, err := delegate.ListFromBytes(d.ConfList)
	if err != nil {
		return nil, nil, fmt.Errorf("prepared delegate: %w", err)
	}
	rt := d.Runtime
	rt.Args, rt.CapabilityArgs = append([][2]string(nil), d.Runtime.Args...), maps.Clone(d.Runtime.CapabilityArgs)
	return list, &rt, nil
}

// PreparedAdd is a CNI ADD up to its delegates' run: the device is taken, the
// record names it, the delegate config and the CNI device-info file, and is
// incomplete (an ADD in progress), and the device-info is copied. The state
// lock is not held: other attachments proceed while the delegates run.
//
// Its exported fields are JSON: an agent may keep it (in memory keyed by
// Key, or on disk) and, in another process or after decoding it, bind it
// again with Plugin.ResumeAdd, which re-reads the record. A prepared ADD
// whose commit never comes (a crash, an entry point gone) leaves exactly
// what a devplumb killed after taking the device leaves: the next ADD of the
// attachment undoes its delegates and adds afresh; DEL and gc remove it.
// Close frees what the call holds in this process without touching that.
//
// A PreparedAdd is not safe for concurrent use.
type PreparedAdd struct {
	Args     skel.CmdArgs   `json:"args"` // the CNI call as the runtime made it
	Key      attachment.Key `json:"attachment"`
	DeviceID string         `json:"deviceID,omitempty"`
	// Delegate is what to run, then report with CommitAdd; nil when the
	// ADD is answered already (Replayed).
	Delegate *Delegate `json:"delegate,omitempty"`
	// Replayed is the result of a repeated ADD of a completed attachment,
	// in the config's cniVersion: print it, nothing to run or commit.
	Replayed json.RawMessage `json:"replayed,omitempty"`

	c      *call
	rec    *attachment.Record
	prev   *current.Result // the chain's prevResult
	list   *libcni.NetworkConfigList
	rt     *libcni.RuntimeConf
	undo   *types.Error // CommitAdd failed after the delegates ran: Rollback is due
	ended  bool
	replay types.Result
}

// PrepareAdd runs ADD's steps 1-4 (pod, devices, take, device-info) and
// returns the delegates' run, or the replayed result of a repeated ADD; a
// CNI error when ADD fails before the delegates (then nothing is held).
func (p *Plugin) PrepareAdd(args *skel.CmdArgs) (*PreparedAdd, error) {
	return p.PrepareAddAhead(args, nil)
}

// Ahead is what an ADD starts before it is prepared: its pod's PodResources
// Get, which the node agent starts on the entry point's lookahead, while the
// hello's answer travels. It takes and writes nothing.
type Ahead struct {
	kubelet *kubeletClient
}

// LookAhead starts what PrepareAddAhead of the same args will read first;
// nil when there is nothing to start (then the prepare starts it).
func (p *Plugin) LookAhead(args *skel.CmdArgs) *Ahead {
	if tooDeep() != nil {
		return nil
	}
	k := p.getAhead(p.startCall(), args)
	if k == nil {
		return nil
	}
	return &Ahead{kubelet: k}
}

// Close gives up what an ADD that was never prepared started.
func (a *Ahead) Close() {
	if a != nil {
		a.kubelet.close()
	}
}

// PrepareAddAhead is PrepareAdd taking over what LookAhead started (nil:
// nothing). Its Get answers the call only for the same pod on the same
// kubelet socket; otherwise the call asks the kubelet itself.
func (p *Plugin) PrepareAddAhead(args *skel.CmdArgs, looked *Ahead) (*PreparedAdd, error) {
	if err := tooDeep(); err != nil {
		looked.Close()
		return nil, cniError(types.ErrInvalidNetworkConfig, err.Error(), nil)
	}
	// 1. The pod comes from CNI_ARGS (newCall reads it: c.pod); the
	// kubelet is asked about it first thing, unless a lookahead did.
	start := p.startCall()
	var ahead *kubeletClient
	if looked != nil {
		ahead = looked.kubelet
	} else {
		ahead = p.getAhead(start, args)
	}
	c, cerr := p.newCallFrom(start, args, true)
	if cerr != nil {
		ahead.close()
		return nil, cerr
	}
	c.kubelet.adopt(ahead)
	a := &PreparedAdd{Args: *args, Key: c.key, c: c}
	if cerr := a.prepare(); cerr != nil {
		a.end(cerr)
		return nil, cerr
	}
	if a.Delegate == nil {
		a.end(nil) // replayed: the call is over
	}
	return a, nil
}

// prepare is steps 2-4; a replay answers at step 3.
func (a *PreparedAdd) prepare() *types.Error {
	c := a.c
	prev, cerr := c.checkAdd()
	if cerr != nil {
		return cerr
	}
	// 2. resourceName -> the device IDs this attachment may take.
	want, cerr := c.devices.find()
	if cerr != nil {
		return cerr
	}
	c.timing.mark(phasePodResources)
	// 3. One of them no other attachment holds, recorded under the lock.
	rec, filled, cerr := c.take(want)
	if cerr != nil {
		return cerr
	}
	a.rec, a.prev, a.DeviceID = rec, prev, rec.DeviceID
	failpoint.Hit("add-claimed")
	if result, replayed := c.replay(rec); replayed {
		return a.answerReplay(result)
	}
	if filled == nil { // its record names no run of this ADD
		c.cleanEarlierAdd(rec)
	}
	// 4. The record of the run to come, and the device-info copied.
	list, rt, cerr := c.startRun(rec, filled)
	if cerr != nil {
		return cerr
	}
	a.list, a.rt = list, rt
	a.Delegate = newDelegate(list, rt, delegate.CacheDir(c.conf.StateDir, c.conf.Name), shareSpec(rec))
	return nil
}

// answerReplay answers a repeated ADD with the result it had. A
// best-effort status write may have failed the first time; replacing
// devplumb's own entries again is harmless.
func (a *PreparedAdd) answerReplay(result types.Result) *types.Error {
	c, rec := a.c, a.rec
	if rec.NetworkStatus != nil {
		c.status.awaitLater(rec)
		if cerr := c.status.setClaim(rec, rec.NetworkStatus, recordedResult(rec)); cerr != nil {
			return cerr
		}
		if cerr := c.status.setPod(rec.NetworkStatus); cerr != nil {
			return cerr
		}
	}
	out, err := result.GetAsVersion(c.conf.CNIVersion)
	if err != nil {
		return cniError(types.ErrIncompatibleCNIVersion, "cannot convert the recorded result to cniVersion "+c.conf.CNIVersion, err)
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return cniError(types.ErrInternal, "cannot encode the recorded result", err)
	}
	a.replay, a.Replayed = out, raw
	return nil
}

// CommitAdd is step 6 after the delegates' ADD: with their result it
// re-reads the CNI device-info file, marks the record complete, writes
// network-status, the claim's networkData and the Event, and returns the
// result to print. With delegateErr (which the runner has undone with the
// delegates' DEL already) it removes the CNI file, frees the device and
// returns the CNI error to print. When it fails with a result given,
// UndoPending is true: the runner runs the delegates' DEL, then Rollback.
func (a *PreparedAdd) CommitAdd(result types.Result, delegateErr error) (types.Result, error) {
	if a.ended || a.Delegate == nil || a.undo != nil {
		return nil, cniError(ErrState, fmt.Sprintf("ADD of attachment %s/%s/%s is not waiting for a commit",
			a.Key.Network, a.Key.ContainerID, a.Key.IfName), nil)
	}
	c := a.c
	c.timing.mark(phaseDelegate)
	if delegateErr != nil {
		c.rollbackFiles(a.rec)
		cerr := shapeError(delegateErr)
		if cerr == nil {
			cerr = delegateError(fmt.Sprintf("delegate ADD failed for device %s", a.rec.DeviceID), delegateErr)
		}
		a.end(cerr)
		return nil, cerr
	}
	failpoint.Hit("add-delegated")
	if result == nil {
		a.undo = cniError(ErrDelegate, "the delegate ADD succeeded with no result", nil)
		return nil, a.undo
	}
	// 6. The network-status entry, recorded and written to the pod (and claim).
	out, cerr := c.finish(a.rec, a.prev, result)
	if cerr != nil {
		a.undo = cerr
		return nil, cerr
	}
	a.end(nil)
	return out, nil
}

// Printed is the result CommitAdd returned as devplumb prints it (the
// indented JSON of types.Result's PrintTo), made from the JSON the record
// keeps: encoding a result again costs the agent a twentieth of an ADD.
func (a *PreparedAdd) Printed() ([]byte, error) {
	if !a.ended || a.rec == nil || !a.rec.Complete {
		return nil, fmt.Errorf("ADD of attachment %s/%s/%s has no committed result", a.Key.Network, a.Key.ContainerID, a.Key.IfName)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, a.rec.Result, "", "    "); err != nil {
		return nil, fmt.Errorf("indent the recorded result: %w", err)
	}
	return buf.Bytes(), nil
}

// UndoPending reports that CommitAdd failed after the delegates' ADD
// succeeded: their DEL is due, then Rollback.
func (a *PreparedAdd) UndoPending() bool { return a.undo != nil && !a.ended }

// Rollback ends an ADD whose commit failed after the delegates ran, once
// their DEL has run: the CNI device-info file goes and the device is freed.
func (a *PreparedAdd) Rollback() {
	if !a.UndoPending() {
		return
	}
	a.c.rollbackFiles(a.rec)
	a.end(a.undo)
}

// Close gives up a prepared ADD without committing it, as a crash would:
// the record stays, in progress, for the next ADD of the attachment (or DEL,
// or gc) to undo. It only frees what the call holds in this process.
func (a *PreparedAdd) Close() {
	if !a.ended {
		a.ended = true
		a.c.close()
	}
}

// end is what every ADD does last, whatever its outcome: the Event on the
// pod (config "events"), the phase timings, the call's connections and log.
func (a *PreparedAdd) end(err error) {
	if a.ended {
		return
	}
	a.ended = true
	a.c.recordAddEvent(a.rec, err)
	a.c.endTiming("ADD", err)
	a.c.close()
}

// runLocal runs the delegates' ADD in this process, as the runtime ran
// devplumb; a failed ADD is undone at once, as every runner must.
func (a *PreparedAdd) runLocal() (types.Result, error) {
	result, err := a.c.delegates.Add(context.Background(), a.list, a.rt)
	if err == nil {
		err = shapeShare(a.Delegate.Shape, a.rt)
	}
	if err != nil {
		a.undoLocal()
	}
	return result, err
}

// undoLocal runs the delegates' DEL of a rolled back ADD: a failure leaves
// what gc finds, and must not hide the ADD's own error.
func (a *PreparedAdd) undoLocal() {
	if err := a.c.delegates.Del(context.Background(), a.list, a.rt); err != nil {
		a.c.log.Error("rollback: delegate DEL failed", "err", err)
	}
	unshapeShare(a.Delegate.Shape, a.rt, a.c.log)
}
