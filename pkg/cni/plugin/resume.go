package plugin

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
)

// ResumeAdd binds a PreparedAdd decoded from JSON (prepared by another
// process, or kept across a restart) to p, for CommitAdd. Nothing but the
// record is trusted as state: the call is rebuilt from its arguments, and the
// record must still be the one PrepareAdd wrote (same device, same delegate
// run, incomplete); a DEL or another ADD of the attachment since makes the
// commit fail with nothing changed.
func (p *Plugin) ResumeAdd(a *PreparedAdd) error {
	if a.Delegate == nil {
		return cniError(ErrState, "the prepared ADD has no delegate run to commit", nil)
	}
	c, cerr := p.newCall(&a.Args, true)
	if cerr != nil {
		return cerr
	}
	if cerr := a.bind(c); cerr != nil {
		c.close()
		return cerr
	}
	return nil
}

func (a *PreparedAdd) bind(c *call) *types.Error {
	if c.key != a.Key {
		return cniError(ErrState, fmt.Sprintf("the prepared ADD names attachment %v, its arguments %v", a.Key, c.key), nil)
	}
	rec, err := c.records.Get(a.Key)
	if err != nil {
		return cniError(ErrState, "cannot read the record of the prepared ADD", err)
	}
	if rec == nil || rec.Complete || rec.DeviceID != a.DeviceID || !sameCompact(rec.Delegate, a.Delegate.ConfList) {
		return cniError(ErrState, fmt.Sprintf("the record of attachment %s/%s/%s changed since its ADD was prepared "+
			"(a DEL, or another ADD of it, ran): run ADD again", a.Key.Network, a.Key.ContainerID, a.Key.IfName), nil)
	}
	prev, err := prevResult(c.args.StdinData, c.conf.CNIVersion)
	if err != nil {
		return cniError(types.ErrDecodingFailure, err.Error(), nil)
	}
	list, rt, err := a.Delegate.Conf()
	if err != nil {
		return cniError(ErrState, "the prepared ADD's delegate run is unusable", err)
	}
	a.c, a.rec, a.prev, a.list, a.rt, a.undo, a.ended = c, rec, prev, list, rt, nil, false
	return nil
}

// ResumeDel binds a PreparedDel decoded from JSON to p, for CommitDel: the
// call is rebuilt from the arguments DEL runs with; the record is the one
// PrepareDel read (CommitDel releases whatever the attachment's record is
// then, as DEL always does).
func (p *Plugin) ResumeDel(d *PreparedDel) error {
	c, cerr := p.newCall(&d.Args, false)
	if cerr != nil {
		return cerr
	}
	if c.key != d.Key {
		c.close()
		return cniError(ErrState, fmt.Sprintf("the prepared DEL names attachment %v, its arguments %v", d.Key, c.key), nil)
	}
	var rec *attachment.Record
	if d.Record != nil {
		cp := *d.Record
		rec = &cp
	}
	if d.Delegate != nil {
		list, rt, err := d.Delegate.Conf()
		if err != nil {
			c.close()
			return cniError(ErrState, "the prepared DEL's delegate run is unusable", err)
		}
		d.list, d.rt = list, rt
	}
	d.c, d.rec, d.ended = c, rec, false
	return nil
}
