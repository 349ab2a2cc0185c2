package nodeview

import (
	"fmt"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/claims"
)

// GCOptions says what GC may remove.
type GCOptions struct {
	DryRun bool
	// Orphans also removes CNI device-info files that no attachment owns.
	// Off by default: Multus writes such files for networks devplumb does
	// not run, and they are not devplumb's to delete.
	Orphans bool
}

// GC removes the claims (and their CNI device-info files) of attachments whose
// pod the kubelet no longer gives the claimed device, and with opts.Orphans
// the unowned CNI files. It refuses to judge staleness without the kubelet.
// It returns what it removed (or would remove, with DryRun).
func GC(v *View, opts GCOptions) ([]string, error) {
	if v.Pods == nil {
		return nil, fmt.Errorf("gc needs the kubelet's PodResources to tell stale claims: %s", v.PodResourcesError)
	}
	store := claims.New(v.Paths.StateDir)
	var done []string
	err := store.Locked(func() error {
		for _, a := range v.Attachments {
			key := claims.Key{Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName}
			// The view was taken before the lock: skip a record that changed since.
			if cur, err := store.Get(key); !a.Stale || err != nil || cur == nil || cur.DeviceID != a.DeviceID {
				continue
			}
			done = append(done, fmt.Sprintf("claim %s/%s/%s (%s of pod %s)", a.Network, short(a.ContainerID), a.IfName, a.DeviceID, a.Pod))
			if a.CNIFile != "" {
				done = append(done, "file "+a.CNIFile)
			}
			if opts.DryRun {
				continue
			}
			if err := store.Remove(key); err != nil {
				return err
			}
			if err := devinfo.RemoveFile(a.CNIFile); a.CNIFile != "" && err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return done, fmt.Errorf("gc: %w", err)
	}
	if opts.Orphans {
		removed, err := removeOrphans(v, opts.DryRun)
		done = append(done, removed...)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func removeOrphans(v *View, dryRun bool) ([]string, error) {
	var done []string
	for _, f := range v.Files {
		if f.Kind != devinfo.KindCNI || f.Claimed {
			continue
		}
		done = append(done, "file "+f.Path)
		if !dryRun {
			if err := devinfo.RemoveFile(f.Path); err != nil {
				return done, fmt.Errorf("gc: %w", err)
			}
		}
	}
	return done, nil
}
