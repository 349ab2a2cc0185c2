package nodeview

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/claims"
	"github.com/devplumb/devplumb/pkg/config"
)

// GCOptions says what GC may remove.
type GCOptions struct {
	DryRun bool
	// Orphans also removes CNI device-info files that no attachment owns.
	// Off by default: Multus writes such files for networks devplumb does
	// not run, and they are not devplumb's to delete.
	Orphans bool
}

// GCAction is one thing GC removed (or, with DryRun, would remove), or a
// stale claim it kept and why.
type GCAction struct {
	Verb string // "remove" or "keep"
	What string
	Why  string `json:",omitempty"`
}

func (a GCAction) String() string {
	if a.Why == "" {
		return a.Verb + " " + a.What
	}
	return a.Verb + " " + a.What + ": " + a.Why
}

// GC removes the claims (and their CNI device-info files) of attachments whose
// pod the kubelet no longer gives the claimed device, and with opts.Orphans
// the CNI files no attachment owns. It reads the claims before it asks the
// kubelet, so every claim it judges was made before the kubelet answered and a
// pod admitted meanwhile is in the answer; under the state lock (not held
// while the kubelet is asked, so ADDs do not wait on it) it removes only
// claims still as they were read, and finds unowned files on records read
// there. It refuses to judge without the kubelet, and keeps a stale claim whose
// netns still exists (the runtime's DEL is still to come, or the kubelet has
// just restarted and not relisted its pods).
func GC(ctx context.Context, p Paths, opts GCOptions) ([]GCAction, error) {
	store := claims.New(p.StateDir)
	// Corrupt records are skipped: their attachment's DEL clears them.
	read, _ := store.List()
	pods, err := listPods(ctx, p.PodResources)
	if err != nil {
		return nil, fmt.Errorf("gc needs the kubelet's PodResources to tell stale claims: %w", err)
	}
	g := &gcRun{p: p, opts: opts, store: store}
	err = store.Locked(func() error {
		for _, a := range read {
			if !stale(pods, a) {
				continue
			}
			if cur, err := store.Get(a.Key); err != nil || !sameClaim(cur, a) {
				continue // released or claimed again since it was read
			}
			if err := g.staleClaim(a); err != nil {
				return err
			}
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

func sameClaim(cur, a *claims.Attachment) bool {
	return cur != nil && cur.DeviceID == a.DeviceID && cur.ResourceName == a.ResourceName && cur.Pod == a.Pod
}

type gcRun struct {
	p     Paths
	opts  GCOptions
	store *claims.Store
	acts  []GCAction
}

func (g *gcRun) staleClaim(a *claims.Attachment) error {
	what := fmt.Sprintf("claim %s/%s/%s (%s of pod %s)", a.Network, short(a.ContainerID), a.IfName, a.DeviceID, a.Pod)
	if a.NetNS != "" {
		if _, err := os.Stat(a.NetNS); err == nil {
			g.acts = append(g.acts, GCAction{Verb: "keep", What: what, Why: "the kubelet no longer gives the pod this device, but its netns " + a.NetNS + " still exists (DEL to come)"})
			return nil
		}
	}
	g.acts = append(g.acts, GCAction{Verb: "remove", What: what})
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
	dirs := []string{filepath.Join(g.p.DeviceInfoDir, devinfo.KindCNI), filepath.Join(devinfo.DefaultDir, devinfo.KindCNI)}
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
	files, err := devinfo.NewStore(g.p.DeviceInfoDir).List()
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
