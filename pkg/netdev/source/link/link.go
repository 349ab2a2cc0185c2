package link

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
)

// Config selects interfaces.
type Config struct {
	Names []string `json:"names"` // globs (path.Match syntax) of interface names
}

// moved is an interface that a CNI plugin moved into another namespace.
type moved struct {
	dev       source.Device
	peerIndex int    // host ifindex of its veth peer, 0 when unknown
	seq       uint64 // Source.seq when the move was recorded
}

// Source is the named-netdev source of one resource.
type Source struct {
	globs []string
	sysfs string
	log   *slog.Logger

	mu    sync.Mutex
	moved map[string]moved
	gone  map[string]source.Device // deleted host interfaces, listed Unhealthy until back
	last  map[string]source.Device // host interfaces at the last scan
	index map[int]bool             // their ifindexes
	seq   uint64                   // counts recorded moves; see Scan

	afterList func() // test hook: runs between listing links and using them
}

// New checks the globs and returns the source; sysfs "" means /sys.
func New(c Config, sysfsRoot string, log *slog.Logger) (*Source, error) {
	if len(c.Names) == 0 {
		return nil, fmt.Errorf("netdevs source: names must list at least one glob")
	}
	for _, g := range c.Names {
		if _, err := filepath.Match(g, ""); err != nil || g == "" {
			return nil, fmt.Errorf("netdevs source: bad name glob %q", g)
		}
	}
	if sysfsRoot == "" {
		sysfsRoot = sysfs.DefaultRoot
	}
	if log == nil {
		log = slog.Default()
	}
	return &Source{globs: c.Names, sysfs: sysfsRoot, log: log, moved: map[string]moved{}, gone: map[string]source.Device{}, last: map[string]source.Device{}}, nil
}

// Kind is "netdevs".
func (s *Source) Kind() string { return "netdevs" }

func (s *Source) matches(name string) bool {
	for _, g := range s.globs {
		if ok, _ := filepath.Match(g, name); ok {
			return true
		}
	}
	return false
}

// Scan lists the selected host interfaces, the moved ones still in use and,
// Unhealthy, the deleted ones. A move recorded after the links were listed is
// newer than the list: the interface it names is in use, not "back in the
// host namespace".
func (s *Source) Scan() ([]source.Device, error) {
	s.mu.Lock()
	start := s.seq
	s.mu.Unlock()
	host, indexes, listed, err := s.listHost()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.index = host, listed
	out := make([]source.Device, 0, len(host)+len(s.moved))
	for name, m := range s.moved {
		switch {
		case m.seq > start:
			delete(host, name) // moved since the list was taken
			out = append(out, m.dev)
		case host[name].ID != "":
			delete(s.moved, name) // back in the host namespace
		case m.peerIndex > 0 && !indexes[m.peerIndex]:
			s.log.Info("moved veth's host peer is gone: the pair was destroyed", "name", name, "peerIndex", m.peerIndex)
			delete(s.moved, name)
		default:
			out = append(out, m.dev)
		}
	}
	for name, d := range s.gone {
		if _, back := host[name]; back {
			delete(s.gone, name)
		} else if _, inUse := s.moved[name]; !inUse {
			out = append(out, d)
		}
	}
	for _, d := range host {
		out = append(out, d)
	}
	source.Sort(out)
	return out, nil
}

// listHost lists the selected host interfaces by name, every host ifindex,
// and the ifindexes of the selected ones.
func (s *Source) listHost() (host map[string]source.Device, indexes, listed map[int]bool, err error) {
	links, err := netlinksafe.LinkList()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("netdevs source: list links: %w", err)
	}
	if s.afterList != nil {
		s.afterList()
	}
	host = map[string]source.Device{}
	indexes, listed = map[int]bool{}, map[int]bool{}
	for _, l := range links {
		a := l.Attrs()
		indexes[a.Index] = true
		if s.matches(a.Name) {
			host[a.Name] = s.describe(a.Name)
			listed[a.Index] = true
		}
	}
	return host, indexes, listed, nil
}

func (s *Source) listedIndex(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index[i]
}

// describe builds the device of a host interface.
func (s *Source) describe(name string) source.Device {
	d := source.Device{Device: deviceplugin.Device{ID: name, Healthy: true, NUMANode: deviceplugin.NoNUMA}}
	devLink := filepath.Join(s.sysfs, "class", "net", name, "device")
	if _, err := os.Lstat(devLink); err == nil {
		if _, err := os.Stat(devLink); err != nil {
			d.Healthy = false // the interface outlived its device
			return d
		}
	}
	if addr := sysfs.NetDevPCIAddress(s.sysfs, name); addr != "" {
		if pd, err := sysfs.Read(s.sysfs, addr); err == nil {
			d.NUMANode = pd.NUMANode
			d.Info = pci.Info(pd)
		}
	}
	return d
}

// linkGone handles an RTM_DELLINK of a host interface. It reports whether
// the source's devices may have changed.
func (s *Source) linkGone(link netlink.Link, index int, movedTo int, wasMoved bool) bool {
	a := link.Attrs()
	s.mu.Lock()
	defer s.mu.Unlock()
	pairDied := false
	for name, m := range s.moved {
		if m.peerIndex == index {
			s.log.Info("moved veth's host peer deleted: the pair was destroyed", "name", name, "peer", a.Name)
			delete(s.moved, name)
			pairDied = true
		}
	}
	if !s.matches(a.Name) {
		return pairDied
	}
	switch {
	case wasMoved:
		s.recordMove(link, movedTo)
	case pairDied:
		// Most likely its pod's namespace was destroyed, taking the pair
		// with it: the pod is gone, and so is the device, for good.
		s.log.Info("interface deleted with its moved veth peer", "name", a.Name)
		delete(s.gone, a.Name)
	default:
		s.log.Info("interface deleted: unhealthy until it is back", "name", a.Name)
		delete(s.moved, a.Name)
		dev, ok := s.last[a.Name]
		if !ok {
			dev = source.Device{Device: deviceplugin.Device{ID: a.Name, NUMANode: deviceplugin.NoNUMA}}
		}
		s.gone[a.Name] = source.Unhealthy(dev, "interface deleted")
	}
	return true
}

// recordMove records an interface moved into another namespace: in use.
func (s *Source) recordMove(link netlink.Link, movedTo int) {
	a := link.Attrs()
	dev, ok := s.last[a.Name]
	if !ok {
		dev = source.Device{Device: deviceplugin.Device{ID: a.Name, Healthy: true, NUMANode: deviceplugin.NoNUMA}}
	}
	s.seq++
	m := moved{dev: dev, seq: s.seq}
	if _, isVeth := link.(*netlink.Veth); isVeth && a.NetNsID < 0 && a.ParentIndex > 0 {
		m.peerIndex = a.ParentIndex
	}
	s.moved[a.Name] = m
	delete(s.gone, a.Name)
	s.log.Info("interface moved to another network namespace: in use", "name", a.Name, "netnsid", movedTo, "vethPeerIndex", m.peerIndex)
}
