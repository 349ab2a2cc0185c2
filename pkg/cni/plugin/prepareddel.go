package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/base/failpoint"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
)

// PreparedDel is a CNI DEL up to its delegates' DEL: the record (if any)
// read, and what the delegates' DEL runs, from the record or rebuilt from the
// config. Nothing is changed yet: a DEL whose commit never comes leaves all
// for the runtime's next DEL.
//
// Its exported fields are JSON, like PreparedAdd's: Plugin.ResumeDel binds a
// decoded one again. A PreparedDel is not safe for concurrent use.
type PreparedDel struct {
	// Args are the CNI call as DEL runs it: a netns already gone cleared, a
	// runtimeConfig.CNIDeviceInfoFile that ADD refuses dropped.
	Args   skel.CmdArgs       `json:"args"`
	Key    attachment.Key     `json:"attachment"`
	Record *attachment.Record `json:"record,omitempty"` // nil: DEL without state
	// CNIFile is the CNI device-info file CommitDel removes ("" for none).
	CNIFile string `json:"cniFile,omitempty"`
	// Delegate is the delegates' DEL to run before CommitDel; nil when none
	// may run (a delegate that is devplumb): commit at once.
	Delegate *Delegate `json:"delegate,omitempty"`

	c     *call
	rec   *attachment.Record
	list  *libcni.NetworkConfigList
	rt    *libcni.RuntimeConf
	ended bool
}

// PrepareDel reads what DEL undoes and returns the delegates' DEL to run.
// nil and no error: nothing to do at all (ADD refused this config, or a newer
// devplumb's attachment); DEL is complete.
func (p *Plugin) PrepareDel(args *skel.CmdArgs) (*PreparedDel, error) {
	if err := tooDeep(); err != nil {
		// Under devplumb, ADD refused everything: there is nothing to undo.
		p.Log.Warn("DEL does nothing", "err", err)
		return nil, nil
	}
	c, cerr := p.newCall(args, false)
	if cerr != nil {
		// The config is parsed again only when it did not parse as it is.
		var done bool
		if c, done, cerr = p.newCallForDel(args, cerr); done || cerr != nil {
			return nil, cerr
		}
	}
	d := &PreparedDel{Key: c.key, c: c}
	if cerr := d.prepare(); cerr != nil {
		d.end(cerr)
		return nil, cerr
	}
	if d.ended {
		return nil, nil
	}
	return d, nil
}

// newCallForDel is DEL's call for a config that did not parse as it is
// (cerr why): done when ADD refused it outright, so there is nothing to undo;
// otherwise the call of the config without what ADD refuses but DEL must get
// past (forDel), or cerr when that is not what was wrong.
func (p *Plugin) newCallForDel(args *skel.CmdArgs, cerr *types.Error) (c *call, done bool, _ *types.Error) {
	_, perr := config.Parse(args.StdinData, nil)
	if errors.Is(perr, config.ErrSelfDelegation) {
		// ADD refused this config (a delegate of devplumb's own type; a link or copy under
		// another name is caught when the delegate runs: selfCheck, tooDeep) before it set
		// anything up or recorded anything: a DEL failing on it would keep the pod
		// terminating for ever.
		p.Log.Warn("DEL does nothing: ADD refuses this config", "err", perr)
		return nil, true, nil
	}
	if perr == nil {
		return nil, false, cerr // the config parses: the node config or CNI_ARGS are wrong
	}
	c, cerr = p.newCall(p.forDel(args), false)
	return c, false, cerr
}

// prepare reads the record and builds the delegates' DEL; a newer
// devplumb's record ends the call with nothing done.
func (d *PreparedDel) prepare() *types.Error {
	c := d.c
	c.forgetGoneNetns()
	rec, newer := c.recordForDel()
	if newer != nil {
		// DEL never fails, and what a newer devplumb set up is not this one's to
		// undo (its delegates, files and record may mean more than it knows):
		// the record stays for that devplumb, or for gc after an upgrade.
		c.log.Warn("DEL leaves the attachment alone", "err", newer)
		d.end(nil)
		return nil
	}
	list, rt, cniFile, cerr := c.delInputs(rec)
	if cerr != nil {
		return cerr
	}
	c.timing.mark(phaseState)
	d.Args, d.Record, d.CNIFile, d.rec, d.list, d.rt = *c.args, rec, cniFile, rec, list, rt
	// A delegate that is devplumb itself would recurse, and ADD never let
	// such a delegate run: its DEL is not run.
	if err := c.delegatesSafe(list); err != nil {
		c.log.Warn("not running the delegate DEL", "err", err)
		return nil
	}
	d.Delegate = newDelegate(list, rt, delegate.CacheDir(c.conf.StateDir, c.conf.Name), shareSpec(rec))
	return nil
}

// CommitDel finishes DEL after the delegates' DEL (delegateErr its error):
// it records that they are undone, removes the CNI device-info file, frees
// the device and removes the API server's entries. A failed delegate DEL of
// a completed attachment fails DEL with the state kept, so it can be retried.
func (d *PreparedDel) CommitDel(delegateErr error) error {
	if d.ended {
		return cniError(ErrState, fmt.Sprintf("DEL of attachment %s/%s/%s is not waiting for a commit",
			d.Key.Network, d.Key.ContainerID, d.Key.IfName), nil)
	}
	d.c.timing.mark(phaseDelegate)
	if cerr := d.commit(delegateErr); cerr != nil {
		d.end(cerr)
		return cerr
	}
	d.end(nil)
	return nil
}

// commit is DEL's steps 4, 3 and 6, after the delegates' DEL (step 5).
func (d *PreparedDel) commit(delegateErr error) *types.Error {
	c, rec := d.c, d.rec
	undone, cerr := c.delegatesUndone(rec, delegateErr)
	if cerr != nil {
		return cerr
	}
	// 4. The CNI device-info file, then 3. the device's record, under the
	// one hold of the state lock that records the delegates undone.
	var filesErr *types.Error
	err := c.records.Retire(c.key, undone, func(err error) {
		c.log.Warn("cannot record that the delegates are undone", "err", err)
	}, func() error {
		failpoint.Hit("del-delegated")
		if filesErr = c.removeCNIFiles(rec, d.CNIFile); filesErr != nil {
			return filesErr
		}
		c.timing.mark(phaseDeviceInfo)
		failpoint.Hit("del-file-removed")
		return nil
	})
	if filesErr != nil {
		return filesErr
	}
	if err != nil {
		return cniError(ErrState, "cannot release the device record in \"stateDir\" "+c.conf.StateDir, err)
	}
	c.timing.mark(phaseTake)
	// 6. Last: with the API server down this waits out its bound, and the
	// device must not wait for that. Under the agent, after DEL answers.
	c.status.removeAll(rec, c.statusNames(rec), c.replaced)
	c.timing.mark(phaseKube)
	return nil
}

// Close gives up a prepared DEL without committing it: nothing was changed,
// and the runtime's next DEL does it all. It frees what the call holds here.
func (d *PreparedDel) Close() {
	if !d.ended {
		d.ended = true
		d.c.close()
	}
}

// end is what every DEL does last: the phase timings, the call's
// connections and log.
func (d *PreparedDel) end(err error) {
	if d.ended {
		return
	}
	d.ended = true
	d.c.endTiming("DEL", err)
	d.c.close()
}

// runLocal runs the delegates' DEL in this process, as the runtime ran
// devplumb; nil when none may run.
func (d *PreparedDel) runLocal() error {
	if d.Delegate == nil {
		return nil
	}
	err := d.c.delegates.Del(context.Background(), d.list, d.rt)
	unshapeShare(d.Delegate.Shape, d.rt, d.c.log)
	return err
}
