package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/base/failpoint"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
)

// Add is CNI ADD, the six steps of DESIGN.md's data path: (1) pod identity
// from CNI_ARGS, (2) resourceName -> device IDs, (3) take one free device,
// (4) copy its device-info, (5) delegate ADD, (6) network-status. It is
// PrepareAdd (1-4), the delegates' run here and CommitAdd (6): the node agent
// runs the same two steps with the run in the CNI entry point.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	a, err := p.PrepareAdd(args)
	if err != nil {
		return err
	}
	if a.Delegate == nil {
		return types.PrintResult(a.replay, a.c.conf.CNIVersion)
	}
	// 5. The delegates' ADD, with the device ID and the CNI file injected.
	result, derr := a.runLocal()
	out, err := a.CommitAdd(result, derr)
	if a.UndoPending() {
		a.undoLocal()
		a.Rollback()
	}
	if err != nil {
		return err
	}
	return types.PrintResult(out, a.c.conf.CNIVersion)
}

// checkAdd refuses, before anything is taken, an ADD that cannot succeed:
// names too long for its files, a prevResult that is not one, a delegate
// that is devplumb. It returns the chain's prevResult (nil when none).
func (c *call) checkAdd() (*current.Result, *types.Error) {
	if cerr := c.checkFileNames(); cerr != nil {
		return nil, cerr
	}
	prev, err := prevResult(c.args.StdinData, c.conf.CNIVersion)
	if err != nil {
		return nil, cniError(types.ErrDecodingFailure, err.Error(), nil)
	}
	if cerr := c.refuseSelf(); cerr != nil {
		return nil, cerr
	}
	return prev, nil
}

// maxFileName is the longest file name Linux filesystems take.
const maxFileName = 255

// checkFileNames refuses, before anything is taken or written, an
// attachment whose names cannot form the file names it needs: libcni's
// cache "<network>-<containerID>-<ifname>" and the CNI device-info file
// "<network>-<containerID>_<ifname>" (the CNI specification limits none
// of the three in length). DEL needs no such check: it finds nothing.
func (c *call) checkFileNames() *types.Error {
	network := c.conf.Name // libcni's cache
	if len(c.names.network()) > len(network) {
		network = c.names.network() // the CNI device-info file
	}
	n := len(network) + len(c.args.ContainerID) + len(c.args.IfName) + 2
	if n <= maxFileName {
		return nil
	}
	return cniError(types.ErrInvalidNetworkConfig, fmt.Sprintf("container ID (%d bytes), network name %q and interface name %q "+
		"together make a %d-byte file name (<network>-<containerID>-<ifname>, libcni's cache and the CNI device-info file): "+
		"the limit is %d; use a shorter container ID or network name",
		len(c.args.ContainerID), network, c.args.IfName, n, maxFileName), nil)
}

// cleanEarlierAdd undoes the delegates of an earlier ADD of this attachment
// that recorded its delegate config and is not being replayed: one devplumb
// died in (the delegate ran, completion was never recorded), or a repeat with
// other inputs. Running the delegate ADD again on top of it would fail
// (host-device finds its device in the pod already). The CNI file stays: it
// may be the caller's, and attach writes it again.
func (c *call) cleanEarlierAdd(rec *attachment.Record) {
	if len(rec.Delegate) == 0 {
		return
	}
	c.log.Info("undoing the delegates of an earlier ADD of this attachment", "container", rec.ContainerID, "ifname", rec.IfName)
	if err := c.undoDelegate(rec); err != nil {
		c.log.Warn("cannot undo the delegates of an earlier ADD of this attachment", "err", err)
	}
}

// take is step 3 of ADD: one of the candidates no other attachment holds,
// recorded for this attachment under the state lock; the records it
// supersedes (older sandboxes of the pod, stale holders) are undone. A
// device taken afresh is recorded with the run to come in the same write
// (its run is returned); one the attachment held already keeps its record
// until cleanEarlierAdd has undone what that names (run nil).
func (c *call) take(want *candidates) (*attachment.Record, *run, *types.Error) {
	var filled *run
	var fillErr *types.Error
	fill := func(rec *attachment.Record) error {
		noteClaim(rec, want)
		list, rt, cerr := c.recordRun(rec)
		if cerr != nil {
			fillErr = cerr
			return cerr
		}
		filled = &run{list: list, rt: rt}
		return nil
	}
	taken, err := c.takeJudged(attachment.Request{Key: c.key, Pod: c.pod, ResourceName: want.resourceName,
		Candidates: want.ids, SandboxGone: sandboxGone, Fill: fill}, want)
	c.timing.mark(phaseTake)
	if taken != nil {
		if taken.Unreadable != nil {
			c.log.Warn("passing over corrupt state records; remove them or run DEL of their attachments", "err", taken.Unreadable)
		}
		c.dropOlderSandboxes(taken.Dropped)
	}
	switch {
	case fillErr != nil:
		return nil, nil, fillErr
	case errors.Is(err, attachment.ErrNoFreeDevice):
		return nil, nil, cniError(ErrNoFreeDevice, err.Error(), nil)
	case err != nil:
		return nil, nil, cniError(ErrState, "cannot record the device taken in \"stateDir\" "+c.conf.StateDir, err)
	}
	noteClaim(taken.Record, want)
	return taken.Record, filled, nil
}

// takeJudged takes with every holder judged under the lock that can be
// without the kubelet, and asks the kubelet about other pods' holders (every
// record read again, before the lock) only when one stands before every free
// candidate (attachment.ErrAskFirst); then it takes again. The device taken
// is the one a single Take with every answer at hand takes.
func (c *call) takeJudged(req attachment.Request, want *candidates) (*attachment.Taken, error) {
	req.Stale, req.AskFirst = c.devices.judgedLocally()
	taken, err := c.records.Take(req)
	if !errors.Is(err, attachment.ErrAskFirst) {
		return taken, err
	}
	c.dropOlderSandboxes(taken.Dropped) // removed by this Take
	req.Stale, req.AskFirst = c.devices.staleHolders(want), nil
	return c.records.Take(req)
}

// run is the delegates' run an ADD recorded: what startRun hands on.
type run struct {
	list *libcni.NetworkConfigList
	rt   *libcni.RuntimeConf
}

// refuseSelf fails ADD, before anything is taken, when a delegate is
// devplumb: nothing recorded then names it for a later DEL to run.
func (c *call) refuseSelf() *types.Error {
	list, cerr := c.buildList("")
	if cerr != nil {
		return cerr
	}
	if err := c.delegatesSafe(list); err != nil {
		return cniError(types.ErrInvalidNetworkConfig, `invalid "delegate": `+err.Error(), nil)
	}
	return nil
}

// replay answers an ADD repeated (without DEL) for an attachment completed
// with the same inputs with the result it had, instead of running the
// delegates again: a second host-device ADD fails, as the device is in the
// pod already, and its rollback would tear down the working attachment.
func (c *call) replay(rec *attachment.Record) (types.Result, bool) {
	if !rec.Complete || len(rec.Result) == 0 || rec.NetNS != c.args.Netns {
		return nil, false
	}
	list, cerr := c.delegateList(rec)
	if cerr != nil || !sameCompact(list.Bytes, rec.Delegate) {
		return nil, false
	}
	cniFile, err := c.names.cniFile()
	if err != nil || cniFile != rec.CNIFile || !sameJSON(c.runtime(rec.DeviceID, cniFile), rec) {
		return nil, false
	}
	result, err := create.CreateFromBytes(rec.Result)
	if err != nil {
		return nil, false
	}
	c.log.Info("ADD repeated for a completed attachment: returning its result", "container", rec.ContainerID, "ifname", rec.IfName)
	return result, true
}

// sameCompact compares JSON texts ignoring white space (state is indented).
func sameCompact(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// sameJSON reports whether the runtime arguments equal those recorded, as
// they were stored: in JSON, where an empty list or map is left out.
func sameJSON(rt *libcni.RuntimeConf, rec *attachment.Record) bool {
	enc := func(args [][2]string, caps map[string]any) []byte {
		var v [2]any
		if len(args) > 0 {
			v[0] = args
		}
		if len(caps) > 0 {
			v[1] = caps
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil
		}
		return b
	}
	a := enc(rt.Args, rt.CapabilityArgs)
	return a != nil && bytes.Equal(a, enc(rec.CNIArgs, rec.CapabilityArgs))
}

// dropOlderSandboxes undoes the attachments whose records Take dropped (a
// pod's replaced sandbox, or a holder the kubelet no longer knows), so their
// delegates release what they hold (IPAM leases, the device) now rather
// than never: the late DEL of such a sandbox finds no state.
func (c *call) dropOlderSandboxes(dropped []*attachment.Record) {
	for _, a := range dropped {
		c.log.Info("dropping an older record of the device", "pod", a.Pod.String(), "container", a.ContainerID, "device", a.DeviceID)
		if err := c.undo(a); err != nil {
			c.log.Warn("cannot undo the attachment of a dropped record", "container", a.ContainerID, "err", err)
		}
		// Before this ADD applies its own: the device may be the same.
		c.status.removeClaim(a)
	}
}

// startRun records the delegates' run to come, unless take recorded it with
// the device (filled), and copies the device-info (step 4); a failure frees
// the device. The record names the CNI file and the delegate config before
// either is used, so a DEL or GC after a crash at any point finds what to
// undo.
func (c *call) startRun(rec *attachment.Record, filled *run) (*libcni.NetworkConfigList, *libcni.RuntimeConf, *types.Error) {
	if filled == nil {
		var cerr *types.Error
		if filled, cerr = c.recordRunAgain(rec); cerr != nil {
			return nil, nil, cerr
		}
	}
	failpoint.Hit("add-recorded")
	// 4. The device plugin's device-info, copied to the attachment's CNI file.
	if cerr := c.copyDeviceInfo(rec); cerr != nil {
		c.rollbackFiles(rec)
		return nil, nil, cerr
	}
	c.timing.mark(phaseDeviceInfo)
	failpoint.Hit("add-devinfo-copied")
	return filled.list, filled.rt, nil
}

// recordRunAgain records the run to come in the record of an attachment
// that held its device already (a retried ADD).
func (c *call) recordRunAgain(rec *attachment.Record) (*run, *types.Error) {
	list, rt, cerr := c.recordRun(rec)
	if cerr != nil {
		c.release(rec)
		return nil, cerr
	}
	if err := c.records.Update(rec); err != nil {
		c.release(rec)
		return nil, stateError(c.conf.StateDir, err)
	}
	c.timing.mark(phaseTake)
	return &run{list: list, rt: rt}, nil
}

// recordRun fills rec with the CNI file and the delegate run, not yet done.
func (c *call) recordRun(rec *attachment.Record) (*libcni.NetworkConfigList, *libcni.RuntimeConf, *types.Error) {
	cniFile, err := c.names.cniFile()
	if err != nil {
		return nil, nil, cniError(types.ErrInvalidNetworkConfig, "cannot name the CNI device-info file", err)
	}
	list, cerr := c.delegateList(rec)
	if cerr != nil {
		return nil, nil, cerr
	}
	rt := c.runtime(rec.DeviceID, cniFile)
	rec.CNIFile, rec.Delegate, rec.NetNS, rec.CNIArgs, rec.CapabilityArgs = cniFile, list.Bytes, c.args.Netns, rt.Args, rt.CapabilityArgs
	rec.CNIPath = c.args.Path
	rec.Complete, rec.Result, rec.NetworkStatus = false, nil, nil
	return list, rt, nil
}

// stateError reports a failed state write; a device lost to a newer sandbox
// or a takeover says so, since retrying ADD is then the fix.
func stateError(stateDir string, err error) *types.Error {
	if errors.Is(err, attachment.ErrDeviceLost) {
		return cniError(ErrNoFreeDevice, err.Error(), nil)
	}
	return cniError(ErrState, "cannot write state in \"stateDir\" "+stateDir, err)
}

// copyDeviceInfo copies the device plugin's file, if it wrote one, to the
// attachment's CNI file. No DP file is fine (the spec's "can"); a bad one is not.
func (c *call) copyDeviceInfo(rec *attachment.Record) *types.Error {
	err := devinfo.ErrNotFound
	if rec.ResourceName != "" {
		var info *devinfo.DeviceInfo
		var data []byte
		info, data, err = c.deviceInfo.CopyDPToCNI(rec.ResourceName, rec.DeviceID, rec.CNIFile)
		if err == nil {
			// Checked after the copy so that rollback removes the copy.
			err = devinfo.CheckFiledUnder(info, rec.DeviceID)
		}
		if err == nil {
			c.copied = copiedFile{data: data, info: info}
		}
	}
	if errors.Is(err, devinfo.ErrNotFound) && c.conf.RuntimeConfig.CNIDeviceInfoFile == "" {
		// A file left at our deterministic name by a crashed attachment
		// must not reach the delegate as if it described this device.
		if rerr := devinfo.RemoveFile(rec.CNIFile); rerr != nil {
			return cniError(types.ErrIOFailure, "cannot remove a stale CNI device-info file", rerr)
		}
		return nil
	}
	if err == nil || errors.Is(err, devinfo.ErrNotFound) {
		return nil
	}
	return cniError(ErrDeviceInfo, fmt.Sprintf("the device plugin's device-info file for %s device %s is invalid: "+
		"fix or remove it (spec section 3)", rec.ResourceName, rec.DeviceID), err)
}

func (c *call) runtime(deviceID, cniFile string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID:    c.args.ContainerID,
		NetNS:          c.args.Netns,
		IfName:         c.args.IfName,
		Args:           c.cniArgs,
		CapabilityArgs: delegate.CapabilityArgs(c.conf, deviceID, cniFile),
	}
}

// finish re-reads the CNI file, builds the network-status entry, records
// the completed attachment and tells the API server. It returns the result
// to print: the delegates' after the chain's prevResult, in the config's
// cniVersion.
func (c *call) finish(rec *attachment.Record, prev *current.Result, result types.Result) (types.Result, *types.Error) {
	info, err := devinfo.ReadFileAs(rec.CNIFile, c.copied.data, c.copied.info)
	if errors.Is(err, devinfo.ErrNotFound) {
		info, err = nil, nil
	}
	if err != nil {
		return nil, cniError(ErrDeviceInfo, "the CNI device-info file is invalid after the delegate ran: "+
			"the delegate must write the spec's format", err)
	}
	entry, err := networkStatus(result, c.names.network(), c.args.IfName, info)
	if err != nil {
		return nil, cniError(ErrDelegate, "cannot read the delegate's result", err)
	}
	out, raw, cerr := c.output(prev, result)
	if cerr != nil {
		return nil, cerr
	}
	rec.Result, rec.NetworkStatus, rec.Complete = raw, entry, true
	rec.Phases = c.timing.mark(phaseNetworkStatus).recorded()
	// The API writes go while the completed record is written: neither
	// waits for the other, and no failure of either leaves an entry on the
	// pod or the claim.
	c.status.awaitLater(rec)
	written := c.status.setAllAsync(*rec, entry, result)
	if err := c.records.Update(rec); err != nil {
		if written() == nil {
			c.status.unsetAll(rec, entry, c.replaced)
		}
		return nil, stateError(c.conf.StateDir, err)
	}
	c.timing.mark(phaseState)
	failpoint.Hit("add-completed")
	cerr = written()
	c.timing.mark(phaseKube)
	return out, cerr
}

// output is the result devplumb prints, and its JSON for the state.
func (c *call) output(prev *current.Result, result types.Result) (types.Result, []byte, *types.Error) {
	merged, err := withPrev(prev, result)
	if err != nil {
		return nil, nil, cniError(ErrDelegate, "cannot add the delegate result to prevResult", err)
	}
	out, err := merged.GetAsVersion(c.conf.CNIVersion)
	if err != nil {
		return nil, nil, cniError(types.ErrIncompatibleCNIVersion, "cannot convert the delegate result to cniVersion "+c.conf.CNIVersion, err)
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, nil, cniError(types.ErrInternal, "cannot encode the result", err)
	}
	return out, raw, nil
}

// rollbackFiles undoes an ADD after its delegates' DEL: the CNI file, then
// the record, freeing the device.
func (c *call) rollbackFiles(rec *attachment.Record) {
	if rec.CNIFile != "" {
		if err := devinfo.RemoveFile(rec.CNIFile); err != nil {
			c.log.Error("rollback: cannot remove CNI device-info file", "err", err)
		}
	}
	c.release(rec)
}

func (c *call) release(rec *attachment.Record) {
	if err := c.records.ReleaseHeld(rec); err != nil {
		c.log.Error("rollback: cannot release the device record", "err", err)
	}
}
