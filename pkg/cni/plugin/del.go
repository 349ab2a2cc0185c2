package plugin

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
	"github.com/devplumb/devplumb/pkg/cni/leftover"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// Del is CNI DEL: ADD's steps backwards (delegate DEL, the CNI device-info
// file, the device's record, the API server's entries). With state it
// undoes exactly what ADD did; without state it runs the delegate DEL from
// the stdin config and removes the deterministic CNI file. Something
// already gone is never an error. It is PrepareDel, the delegates' DEL here
// and CommitDel, as the node agent runs them with the DEL in the entry point.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	d, err := p.PrepareDel(args)
	if d == nil || err != nil {
		return err
	}
	// 5. The delegates' DEL.
	return d.CommitDel(d.runLocal())
}

// recordForDel is the attachment's record, or nil: a corrupt record cannot
// guide DEL, which then takes the stateless path. newer is set when a newer
// devplumb wrote the record (see attachment.Record.Newer).
func (c *call) recordForDel() (rec *attachment.Record, newer error) {
	rec, err := c.records.Get(c.key)
	if errors.Is(err, attachment.ErrNewerFormat) {
		return nil, err
	}
	if err != nil {
		c.log.Warn("ignoring unreadable state", "err", err)
		return nil, nil
	}
	return rec, rec.Newer()
}

// delegatesUndone judges the delegates' DEL (err its error). It returns the
// record to write back as undone (rec, no longer complete), nil when rec is
// not a completed attachment's.
func (c *call) delegatesUndone(rec *attachment.Record, err error) (*attachment.Record, *types.Error) {
	if err != nil {
		if rec != nil && rec.Complete {
			return nil, delegateError("delegate DEL failed (state kept, DEL can be retried)", err)
		}
		// Without a completed ADD nothing proves the delegate ADD ran (or
		// a DEL killed after it already undid it): a delegate whose DEL
		// fails on what is not there (host-device) must not fail DEL.
		c.log.Warn("delegate DEL failed for an attachment with no completed ADD", "err", err)
	}
	if rec == nil || !rec.Complete {
		return nil, nil
	}
	// Recorded so that a DEL killed before it removes the record and run
	// again does not fail on a second delegate DEL.
	rec.Complete = false
	return rec, nil
}

// removeCNIFiles removes the attachment's CNI device-info file and, with no
// record to name it, the one an older devplumb would have named.
func (c *call) removeCNIFiles(rec *attachment.Record, cniFile string) *types.Error {
	if cniFile != "" {
		if err := devinfo.RemoveFile(cniFile); err != nil {
			return cniError(types.ErrIOFailure, "cannot remove the CNI device-info file", err)
		}
	}
	if rec == nil {
		c.removeLegacyCNIFile()
	}
	return nil
}

// forDel drops from a config that does not parse what ADD would refuse
// but DEL must get past: a runtimeConfig.CNIDeviceInfoFile that ADD refused
// (outside the device-info dirs, a NUL byte, a name too long: ADD never wrote
// it, so DEL removes only the file of the deterministic name, in devplumb's
// own directory), and the node config's keys (a network config written
// before they moved there: its pods attached with the node's settings only
// if they were the same, and DEL uses the node's). Failing on either would
// make DEL fail for ever. Del calls it only for a config that does not parse.
func (p *Plugin) forDel(args *skel.CmdArgs) *skel.CmdArgs {
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(args.StdinData))
	dec.UseNumber() // numbers in the delegate config pass through as written
	if dec.Decode(&raw) != nil || raw == nil {
		return args
	}
	var dropped []string
	for _, k := range nodeconfig.Keys {
		if _, ok := raw[k]; ok {
			delete(raw, k)
			dropped = append(dropped, k)
		}
	}
	if rc, ok := raw["runtimeConfig"].(map[string]any); ok && rc["CNIDeviceInfoFile"] != nil {
		delete(rc, "CNIDeviceInfoFile")
		dropped = append(dropped, "runtimeConfig.CNIDeviceInfoFile")
	}
	stdin, err := json.Marshal(raw)
	if len(dropped) == 0 || err != nil {
		return args
	}
	if _, err := config.Parse(stdin, nil); err != nil {
		return args // something else is wrong: report that
	}
	p.Log.Warn("DEL ignores keys that ADD refuses", "keys", dropped)
	own := *args
	own.StdinData = stdin
	return &own
}

// forgetGoneNetns clears a netns that no longer exists: the sandbox is gone
// and took the interface with it; delegates clean the rest (IPAM, host side)
// given no netns, as CNI allows.
func (c *call) forgetGoneNetns() {
	if c.args.Netns != "" && leftover.NetnsGone(c.args.Netns) {
		c.log.Info("netns already gone; running DEL without it", "netns", c.args.Netns)
		c.args.Netns = ""
	}
}

// delInputs is what DEL runs: the cached delegate config and arguments of
// ADD, else those rebuilt from the stdin config.
func (c *call) delInputs(rec *attachment.Record) (*libcni.NetworkConfigList, *libcni.RuntimeConf, string, *types.Error) {
	if rec != nil && len(rec.Delegate) > 0 {
		list, err := delegate.ListFromBytes(rec.Delegate)
		if err == nil {
			rt := c.runtime(rec.DeviceID, rec.CNIFile)
			rt.CapabilityArgs = rec.CapabilityArgs
			return list, rt, c.ownedCNIFile(rec.CNIFile), nil
		}
		c.log.Warn("cached delegate config unusable; using the stdin config", "err", err)
	}
	dev := c.conf.DeviceIDFromConfig()
	if rec != nil {
		dev = rec.DeviceID
	}
	cniFile, err := c.names.cniFile()
	if err != nil {
		// Names that cannot form a file name cannot have a file.
		c.log.Warn("no CNI device-info file name for this attachment", "err", err)
		cniFile = ""
	}
	list, cerr := c.buildList(dev)
	if cerr != nil {
		return nil, nil, "", cerr
	}
	return list, c.runtime(dev, cniFile), cniFile, nil
}

// removeLegacyCNIFile removes, for a DEL without state, the CNI device-info file an
// older devplumb would have named after the config's name. A failure only leaves a
// file that gc reports.
func (c *call) removeLegacyCNIFile() {
	if f := c.names.legacyCNIFile(); f != "" {
		if err := devinfo.RemoveFile(f); err != nil {
			c.log.Warn("cannot remove an older CNI device-info file", "file", f, "err", err)
		}
	}
}

// statusNames are the network names this attachment's network-status entry may have:
// the one ADD recorded, else today's and an older devplumb's (the config's name).
func (c *call) statusNames(rec *attachment.Record) []string {
	if rec != nil && rec.NetworkStatus != nil && rec.NetworkStatus.Name != "" {
		return []string{rec.NetworkStatus.Name}
	}
	if n := c.names.network(); n != c.conf.Name {
		return []string{n, c.conf.Name}
	}
	return []string{c.conf.Name}
}

// replaced reports whether a record of another sandbox of this call's pod
// holds the same network and interface now: a later ADD's, whose
// network-status entry and claim status a late removal must leave alone.
// An unreadable store counts as not replaced, as before the check.
func (c *call) replaced() bool {
	if !c.pod.Known() {
		return false
	}
	recs, err := c.records.List()
	if err != nil {
		c.log.Warn("cannot tell whether a later ADD holds the attachment's entries; removing them", "err", err)
		return false
	}
	for _, r := range recs {
		if r.Network == c.key.Network && r.IfName == c.key.IfName && r.ContainerID != c.key.ContainerID &&
			r.Pod.Namespace == c.pod.Namespace && r.Pod.Name == c.pod.Name && (c.pod.UID == "" || r.Pod.UID == c.pod.UID) {
			return true
		}
	}
	return false
}
