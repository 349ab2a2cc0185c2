package nodestate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/base/atomicfile"
	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
	"github.com/devplumb/devplumb/pkg/cni/leftover"
)

// DefaultCNIPath is where runtimes install CNI plugins.
const DefaultCNIPath = "/opt/cni/bin"

// GCOptions says what GC may remove.
type GCOptions struct {
	DryRun bool
	// CNIPath (colon separated) is where the recorded delegates are found,
	// to run their DEL: that releases what they hold (IPAM leases), as the
	// runtime's DEL would have. Empty: the CNI path each record's ADD ran
	// with, else DefaultCNIPath.
	CNIPath string
	// Orphans also removes CNI device-info files that no attachment owns.
	// Off by default: Multus writes such files for networks devplumb does
	// not run, and they are not devplumb's to delete.
	Orphans bool
}

// GCAction is one thing GC removed (or, with DryRun, would remove), or a
// stale attachment record it kept and why.
type GCAction struct {
	Verb string // "remove", "run" (a delegate DEL) or "keep"
	What string
	Why  string `json:",omitempty"`
}

func (a GCAction) String() string {
	if a.Why == "" {
		return a.Verb + " " + a.What
	}
	return a.Verb + " " + a.What + ": " + a.Why
}

// GC removes the records (and their CNI device-info files) of attachments whose
// pod the kubelet no longer gives the recorded device, and with opts.Orphans
// the CNI files no attachment owns. It reads the records before it asks the
// kubelet, so every record it judges was made before the kubelet answered and a
// pod admitted meanwhile is in the answer; under the state lock (not held
// while the kubelet is asked, so ADDs do not wait on it) it removes only
// records still as they were read, and finds unowned files on records read
// there, and removes the temp files a writer killed mid-write left in the
// records' and the CNI device-info files' directories. It refuses to judge
// without the kubelet, and keeps a stale record whose netns still exists (the
// runtime's DEL is still to come, or the kubelet has just restarted and not
// relisted its pods). Before it removes a record it runs
// the recorded delegates' DEL (outside the lock), so their leases go as a
// runtime's DEL would have released them; a record whose DEL fails is kept.
// (Its output still says "claim" for a record: scripts and tests read it.)
func GC(ctx context.Context, p Paths, opts GCOptions) ([]GCAction, error) {
	store := attachment.New(p.StateDir)
	// Corrupt records are skipped: their attachment's DEL clears them.
	read, _ := store.List()
	pods, err := listPods(ctx, p.PodResources)
	if err != nil {
		return nil, fmt.Errorf("gc needs the kubelet's PodResources to tell stale attachments: %w", err)
	}
	g := &gcRun{paths: p, opts: opts, store: store}
	// Delegate DELs run before the lock: ADDs on the node never wait on a
	// plugin. A record whose DEL failed is kept, so a later gc tries again.
	var gone []*attachment.Record
	for _, a := range read {
		if stale(pods, a) && g.known(a) && g.netnsGone(a) && g.delegateDel(ctx, a) {
			gone = append(gone, a)
		}
	}
	err = store.Locked(func() error {
		for _, a := range gone {
			if cur, err := store.Get(a.Key); err != nil || !sameHolder(cur, a) {
				continue // released or taken again since it was read
			}
			if err := g.removeStale(a); err != nil {
				return err
			}
		}
		if err := g.staleTemps(); err != nil {
			return err
		}
		if opts.Orphans {
			return g.orphans()
		}
		return nil
	})
	if err != nil {
		return g.acts, fmt.Errorf("gc: %w", err)
	}
	return g.acts, nil
}

// sameHolder: cur is still the record a as gc judged it.
func sameHolder(cur, a *attachment.Record) bool {
	return cur != nil && cur.DeviceID == a.DeviceID && cur.ResourceName == a.ResourceName && cur.Pod == a.Pod
}

type gcRun struct {
	paths Paths
	opts  GCOptions
	store *attachment.Store
	acts  []GCAction
}

// recordName names a record in gc's output, which calls it a claim (the
// older word, kept: scripts and tests read the output).
func recordName(a *attachment.Record) string {
	return fmt.Sprintf("claim %s/%s/%s (%s of pod %s)", a.Network, short(a.ContainerID), a.IfName, a.DeviceID, a.Pod)
}

// known keeps (and says why) a record a newer devplumb wrote: what it set
// up may mean more than this gc knows how to undo.
func (g *gcRun) known(a *attachment.Record) bool {
	if err := a.Newer(); err != nil {
		g.acts = append(g.acts, GCAction{Verb: "keep", What: recordName(a), Why: err.Error()})
		return false
	}
	return true
}

// netnsGone keeps (and says so) a stale record whose netns still exists: the
// runtime's DEL is still to come.
func (g *gcRun) netnsGone(a *attachment.Record) bool {
	if leftover.NetnsGone(a.NetNS) {
		return true
	}
	g.acts = append(g.acts, GCAction{Verb: "keep", What: recordName(a), Why: "the kubelet no longer gives the pod this device, but its netns " + a.NetNS + " still exists (DEL to come)"})
	return false
}

// delegateDel runs the recorded delegates' DEL without a netns (it is gone),
// which releases their leases; false when it failed and the record stays.
func (g *gcRun) delegateDel(ctx context.Context, a *attachment.Record) bool {
	if len(a.Delegate) == 0 {
		return true // the ADD never got as far as running a delegate
	}
	what := fmt.Sprintf("delegate DEL of %s/%s/%s", a.Network, short(a.ContainerID), a.IfName)
	if g.opts.DryRun {
		g.acts = append(g.acts, GCAction{Verb: "run", What: what})
		return true
	}
	list, rt, err := leftover.RecordedDelegate(a)
	if err == nil {
		cniPath := cmp.Or(g.opts.CNIPath, a.CNIPath, DefaultCNIPath)
		err = delegate.New(cniPath, delegate.CacheDir(g.paths.StateDir, a.Network)).Del(ctx, list, rt)
	}
	if err != nil {
		g.acts = append(g.acts, GCAction{Verb: "keep", What: recordName(a), Why: "its delegate DEL failed (run gc again once fixed): " + err.Error()})
		return false
	}
	g.acts = append(g.acts, GCAction{Verb: "run", What: what})
	return true
}

// removeStale removes a stale record and its CNI device-info file.
func (g *gcRun) removeStale(a *attachment.Record) error {
	g.acts = append(g.acts, GCAction{Verb: "remove", What: recordName(a)})
	if !g.opts.DryRun {
		if err := g.store.Remove(a.Key); err != nil {
			return err
		}
	}
	return g.removeFile(a.CNIFile, "")
}

// removeFile removes a CNI device-info file, only when it lies directly in
// the device-info cni directory (or the spec's default one, where Multus
// puts them): a record edited by hand must not make gc delete anything else.
func (g *gcRun) removeFile(path, why string) error {
	if path == "" {
		return nil
	}
	dirs := []string{filepath.Join(g.paths.DeviceInfoDir, devinfo.KindCNI), filepath.Join(devinfo.DefaultDir, devinfo.KindCNI)}
	if err := config.CheckCNIDeviceInfoFile("CNI device-info file", path, dirs); err != nil {
		g.acts = append(g.acts, GCAction{Verb: "keep", What: "file " + path, Why: "not in a device-info directory"})
		return nil
	}
	g.acts = append(g.acts, GCAction{Verb: "remove", What: "file " + path, Why: why})
	if g.opts.DryRun {
		return nil
	}
	return devinfo.RemoveFile(path)
}

// orphans removes the CNI files no record names. The caller holds the lock,
// so no ADD names a new file meanwhile.
func (g *gcRun) orphans() error {
	recs, corrupt := g.store.List()
	if corrupt != nil {
		// An unreadable record may own any CNI file.
		g.acts = append(g.acts, GCAction{Verb: "keep", What: "unowned CNI device-info files",
			Why: fmt.Sprintf("some state records are unreadable, and might own them (%v)", corrupt)})
		return nil
	}
	files, err := devinfo.NewStore(g.paths.DeviceInfoDir).List()
	if err != nil {
		return err
	}
	owned := map[string]bool{}
	for _, a := range recs {
		owned[a.CNIFile] = true
	}
	for _, f := range files {
		if f.Kind == devinfo.KindCNI && !owned[f.Path] {
			if err := g.removeFile(f.Path, "no attachment owns it"); err != nil {
				return err
			}
		}
	}
	return nil
}

// staleTemps removes the temp files of atomic writes (atomicfile) that a
// devplumb killed between its create and its rename left in the records'
// and the CNI device-info files' directories: no reader lists them, and
// nothing else would remove them. The caller holds the lock, and only old
// ones go, so no live writer's temp file is touched.
func (g *gcRun) staleTemps() error {
	dirs := [][2]string{{g.paths.StateDir, "attachments"}, {g.paths.DeviceInfoDir, devinfo.KindCNI}}
	for _, d := range dirs {
		dir, err := safefile.CheckDirUnder(d[0], d[1])
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("temp files: %w", err)
		}
		stale, err := atomicfile.StaleTemps(dir, atomicfile.TempAge)
		if err != nil {
			return err
		}
		for _, p := range stale {
			g.acts = append(g.acts, GCAction{Verb: "remove", What: "file " + p,
				Why: "a temp file of a write that never finished (its writer was killed)"})
			if g.opts.DryRun {
				continue
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove a stale temp file: %w", err)
			}
		}
	}
	return nil
}
