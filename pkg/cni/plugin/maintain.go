package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/leftover"
)

// Check is CNI CHECK: the record and the CNI file are present and valid, and
// the delegates' CHECK passes.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	c, cerr := p.newCall(args, false)
	if cerr != nil {
		return cerr
	}
	rec, err := c.records.Get(c.key)
	if err != nil {
		return cniError(ErrState, "devplumb state of this attachment is unreadable", err)
	}
	if rec == nil || !rec.Complete || rec.DeviceID == "" {
		return cniError(ErrState, fmt.Sprintf("no completed ADD recorded for network %s, container %s, interface %s: "+
			"run ADD again", c.key.Network, c.key.ContainerID, c.key.IfName), nil)
	}
	defer c.close()
	if cerr := c.devices.checkKubelet(rec); cerr != nil {
		return cerr
	}
	if rec.NetworkStatus != nil && rec.NetworkStatus.DeviceInfo != nil {
		if _, err := devinfo.ReadFile(rec.CNIFile); err != nil {
			return cniError(ErrDeviceInfo, "the CNI device-info file of this attachment is missing or invalid", err)
		}
	}
	list, rt, _, cerr := c.delInputs(rec)
	if cerr != nil {
		return cerr
	}
	if err := c.delegatesSafe(list); err != nil {
		return cniError(types.ErrInvalidNetworkConfig, `invalid "delegate": `+err.Error(), nil)
	}
	if cerr := checkShape(shareSpec(rec), rt); cerr != nil {
		return cerr
	}
	err = c.delegates.Check(context.Background(), list, rt)
	if errors.Is(err, libcni.ErrorCheckNotSupp) {
		// A delegate pinned to a cniVersion before 0.4.0 has no CHECK; what
		// devplumb itself set up was checked above.
		c.log.Debug("delegate CHECK skipped", "reason", err)
		return nil
	}
	if err != nil {
		return delegateError("delegate CHECK failed", err)
	}
	return nil
}

// Status is CNI STATUS: the kubelet's PodResources API answers, then the
// delegates report ready.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	c, cerr := p.newCall(args, false)
	if cerr != nil {
		return cerr
	}
	if err := c.podResourcesAnswers(); err != nil {
		return cniError(types.ErrPluginNotAvailable, "the kubelet PodResources API at "+c.conf.PodResourcesSocket+
			" does not answer: is the kubelet running, and is \"podResourcesSocket\" right?", err)
	}
	list, cerr := c.buildList("")
	if cerr != nil {
		return cerr
	}
	if err := c.delegatesSafe(list); err != nil {
		return cniError(types.ErrInvalidNetworkConfig, `invalid "delegate": `+err.Error(), nil)
	}
	if err := c.delegates.Status(context.Background(), list); err != nil {
		var te *types.Error
		if errors.As(err, &te) && te.Code != 0 && te.Code < 100 {
			return delegateError("delegate STATUS", err)
		}
		return cniError(types.ErrPluginNotAvailable, "a delegate is not ready", err)
	}
	return nil
}

func (c *call) podResourcesAnswers() error {
	pr, cerr := c.kubelet.open()
	if cerr != nil {
		return cerr
	}
	defer c.close()
	ctx, cancel := c.ctx()
	defer cancel()
	_, err := pr.Allocatable(ctx)
	return err
}

// GC is CNI GC: attachments of this network not in
// cni.dev/valid-attachments lose their delegate setup, CNI file and record;
// then libcni GCs the delegates.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	c, cerr := p.newCall(args, false)
	if cerr != nil {
		return cerr
	}
	valid := map[types.GCAttachment]bool{}
	for _, a := range c.conf.ValidAttachments {
		valid[a] = true
	}
	isValid := func(k attachment.Key) bool {
		return valid[types.GCAttachment{ContainerID: k.ContainerID, IfName: k.IfName}]
	}
	errs, newer := c.collectStale(isValid)
	list, cerr := c.buildList("")
	if cerr != nil {
		return cerr
	}
	if err := c.delegatesSafe(list); err != nil {
		c.log.Warn("not running the delegate GC", "err", err)
	} else if err := c.delegates.GC(context.Background(), list, append(slices.Clone(c.conf.ValidAttachments), newer...)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return cniError(ErrDelegate, "GC could not clean every stale attachment; it can be run again", err)
	}
	return nil
}

// collectStale removes this network's attachments that are not valid,
// including records too corrupt to read (their delegates are left to
// libcni's GC, which has its own cache of what ADD ran). The attachments of
// newer devplumbs' records are refused and returned, so that libcni's GC
// (which runs the DEL of every cached attachment not valid) leaves their
// delegates alone too.
func (c *call) collectStale(valid func(attachment.Key) bool) (errs []error, newer []types.GCAttachment) {
	recs, err := c.records.List()
	if err != nil {
		c.log.Warn("some state is unreadable; GC continues with the rest", "err", err)
	}
	for _, rec := range recs {
		if rec.Network != c.conf.Name || valid(rec.Key) {
			continue
		}
		if err := rec.Newer(); err != nil {
			errs = append(errs, fmt.Errorf("GC of container %s interface %s: %w", rec.ContainerID, rec.IfName, err))
			newer = append(newer, types.GCAttachment{ContainerID: rec.ContainerID, IfName: rec.IfName})
			continue
		}
		errs = append(errs, c.collect(rec))
	}
	corrupt, err := c.records.RemoveCorrupt(c.conf.Name, valid)
	errs = append(errs, err)
	for _, k := range corrupt {
		c.log.Warn("removed a corrupt state record", "container", k.ContainerID, "ifname", k.IfName)
		if f, err := c.deviceInfo.CNIPath(devinfo.CNIFileName(k.Network, k.ContainerID, k.IfName)); err == nil {
			errs = append(errs, devinfo.RemoveFile(f))
		}
	}
	return errs, newer
}

// collect removes one stale attachment: what it set up, then its record.
func (c *call) collect(rec *attachment.Record) error {
	if err := c.undo(rec); err != nil {
		return err
	}
	c.status.removeClaim(rec)
	return c.records.Release(rec.Key)
}

// undo runs the delegate DEL of a recorded attachment with what its ADD used
// and removes its CNI file; the record is the caller's.
func (c *call) undo(rec *attachment.Record) error {
	if err := c.undoDelegate(rec); err != nil {
		if rec.Complete {
			return err
		}
		// As in DEL: an ADD that never completed may never have run the
		// delegate, whose DEL then fails on what is not there.
		c.log.Warn("delegate DEL failed for an attachment with no completed ADD", "container", rec.ContainerID, "err", err)
	}
	if f := c.ownedCNIFile(rec.CNIFile); f != "" {
		return devinfo.RemoveFile(f)
	}
	return nil
}

// undoDelegate runs the delegate DEL of a recorded attachment, if its ADD
// got as far as recording the delegate config.
func (c *call) undoDelegate(rec *attachment.Record) error {
	// A sandbox already gone left nothing inside it: DEL without netns.
	list, rt, err := leftover.RecordedDelegate(rec)
	if list == nil || err != nil {
		return err
	}
	if err := c.delegatesSafe(list); err != nil {
		c.log.Warn("not running the recorded delegate DEL", "container", rec.ContainerID, "err", err)
		return nil
	}
	inv, err := c.plugin.invoker(c.args.Path, c.records, rec.Network) // rec may be of another network of the pod
	if err != nil {
		return err
	}
	if err := inv.Del(context.Background(), list, rt); err != nil {
		return fmt.Errorf("delegate DEL of container %s interface %s: %w", rec.ContainerID, rec.IfName, err)
	}
	return nil
}
