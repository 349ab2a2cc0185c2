package link

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// DefaultNetnsDirs are where named network namespaces live (ip netns,
// containerd and CRI-O pod sandboxes).
var DefaultNetnsDirs = []string{"/var/run/netns", "/run/netns"}

// DiscoverMoved finds interfaces of the source that a CNI plugin moved into
// another network namespace before the source started, so that a restarted
// plugin keeps listing devices that pods hold. host-device records the host
// name of an interface it moves in the interface's alias (IFLA_IFALIAS); an
// interface in another namespace whose alias matches the source's globs is in
// use. Namespaces are found in nsDirs (default DefaultNetnsDirs) and through
// /proc/<pid>/ns/net of every process; each is entered once. Namespaces that
// cannot be entered are skipped. It returns the names found.
func (s *Source) DiscoverMoved(nsDirs ...string) ([]string, error) {
	if len(nsDirs) == 0 {
		nsDirs = DefaultNetnsDirs
	}
	self, err := nsID("/proc/self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("netdevs source: own network namespace: %w", err)
	}
	hostLinks, err := netlinksafe.LinkList()
	if err != nil {
		return nil, fmt.Errorf("netdevs source: list links: %w", err)
	}
	seen := map[[2]uint64]bool{self: true}
	var found []string
	for _, path := range namespacePaths(nsDirs) {
		id, err := nsID(path)
		if err != nil || seen[id] {
			continue
		}
		seen[id] = true
		found = append(found, s.discoverIn(path, hostLinks)...)
	}
	return found, nil
}

// namespacePaths lists candidate namespace files.
func namespacePaths(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			out = append(out, filepath.Join(d, e.Name()))
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	return append(out, procs...)
}

// nsID identifies a namespace by device and inode of its nsfs file.
func nsID(path string) ([2]uint64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return [2]uint64{}, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]uint64{}, fmt.Errorf("%s: no inode", path)
	}
	return [2]uint64{uint64(sys.Dev), sys.Ino}, nil
}

// discoverIn records the source's moved interfaces found in one namespace.
func (s *Source) discoverIn(path string, hostLinks []netlink.Link) []string {
	var links []netlink.Link
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		links, err = netlinksafe.LinkList()
		return err
	})
	if err != nil {
		s.log.Debug("namespace skipped", "path", path, "err", err)
		return nil
	}
	var found []string
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range links {
		a := l.Attrs()
		if a.Alias == "" || !s.matches(a.Alias) {
			continue
		}
		m := moved{dev: source.Device{Device: deviceplugin.Device{ID: a.Alias, Healthy: true, NUMANode: deviceplugin.NoNUMA}}}
		if _, isVeth := l.(*netlink.Veth); isVeth && hostPeer(hostLinks, a.ParentIndex) {
			m.peerIndex = a.ParentIndex
		}
		s.moved[a.Alias] = m
		found = append(found, a.Alias)
		s.log.Info("interface found in another network namespace: in use", "name", a.Alias, "netns", path, "as", a.Name)
	}
	return found
}

// hostPeer tells whether ifindex is a host veth whose peer lives in another
// namespace, i.e. plausibly the peer of a moved veth.
func hostPeer(hostLinks []netlink.Link, index int) bool {
	for _, l := range hostLinks {
		if _, isVeth := l.(*netlink.Veth); isVeth && l.Attrs().Index == index && l.Attrs().NetNsID >= 0 {
			return true
		}
	}
	return false
}
