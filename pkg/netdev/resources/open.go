package resources

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/netdev/source/socket"
	"github.com/devplumb/devplumb/pkg/netdev/source/vdpa"
)

// Opened is one configured resource's device source and the writer of its
// CDI spec: what both modes serve (as a device plugin in pkg/netdev/dpmode,
// as a DRA driver in pkg/netdev/dramode).
type Opened struct {
	ResourceName string
	Source       source.Source
	CDI          *cdispec.Writer
	SRIOVDP      *SRIOVDP // a resource of the SR-IOV device plugin's config, else nil
}

// Open creates every resource's device source and CDI spec writer, in
// config order. cfg must be valid.
func Open(cfg *Config, log *slog.Logger) ([]Opened, error) {
	var out []Opened
	specs := map[string]string{}
	for i, rc := range cfg.Resources {
		src, err := newSource(rc, cfg.SysfsRoot, log)
		if err != nil {
			return nil, fmt.Errorf("resources[%d] (%s): %w", i, rc.ResourceName, err)
		}
		w, err := cdispec.New(cfg.CDIDir, rc.ResourceName)
		if err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		if other, dup := specs[w.Path()]; dup {
			return nil, fmt.Errorf("resources[%d]: %s and %s would share the CDI spec file %s", i, other, rc.ResourceName, w.Path())
		}
		specs[w.Path()] = rc.ResourceName
		out = append(out, Opened{ResourceName: rc.ResourceName, Source: src, CDI: w, SRIOVDP: rc.SRIOVDP})
	}
	return out, nil
}

func newSource(rc Resource, sysfs string, log *slog.Logger) (source.Source, error) {
	switch {
	case rc.SRIOVDP != nil:
		return pci.NewPool(sysfs, rc.SRIOVDP.Pool)
	case rc.PCI != nil:
		return pci.New(sysfs, *rc.PCI)
	case rc.NetDevs != nil:
		s, err := link.New(*rc.NetDevs, sysfs, log.With("resource", rc.ResourceName))
		if err != nil {
			return nil, err
		}
		// Interfaces that pods hold since before this start are still ours.
		if _, err := s.DiscoverMoved(); err != nil {
			log.Warn("finding interfaces moved into pods before start failed", "resource", rc.ResourceName, "err", err)
		}
		return s, nil
	case rc.VDPA != nil:
		return vdpa.New(sysfs, *rc.VDPA)
	case rc.VhostUser != nil:
		return socket.NewVhostUser(*rc.VhostUser)
	case rc.Memif != nil:
		return socket.NewMemif(*rc.Memif)
	}
	return nil, errors.New("no device source configured")
}
