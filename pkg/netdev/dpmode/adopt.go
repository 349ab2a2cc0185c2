package dpmode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/devplumb/devplumb/devinfo"
)

// adopt takes over the device-info files that an earlier run of this plugin
// left in dp/ because it was killed (SIGKILL, OOM, node crash) before it
// could clean up. The first sync then removes those of devices that no
// longer exist and rewrites the others; a file of a device that still
// exists is never removed, since a pod may be using that device.
//
// File names are "<resource, / as ->-<device ID>-device.json", which cannot
// say for sure whose a file is: "example.com/vf" and "example.com/vf-x" both
// match "example.com-vf-x-0-device.json". So a file is adopted only when the
// longest configured resource prefix matches it and its content is what this
// resource's source writes for that device ID; anything else is left alone.
func adopt(resources []*resource, store *devinfo.Store) error {
	files, err := dpFiles(store)
	if err != nil {
		return fmt.Errorf("adopt device-info files of an earlier run: %w", err)
	}
	for _, name := range files {
		r, id := owner(resources, name)
		if r == nil {
			continue
		}
		path := filepath.Join(store.Dir, devinfo.KindDP, name)
		info, err := devinfo.ReadFile(path)
		if err != nil || !describes(r.source.Kind(), id, info) {
			r.log.Warn("device-info file named like this resource's but not written by it: leaving it alone", "file", path, "err", err)
			continue
		}
		r.log.Info("adopting device-info file of an earlier run", "device", id, "file", path)
		r.files[id] = info
	}
	return nil
}

// dpFiles lists the file names in dp/ alone, not the store's cni/: that directory is
// the CNI plugins', and Multus (the NAD client library) creates it with mode 000, which
// netdev-dp's DaemonSet, without CAP_DAC_OVERRIDE, cannot list (ownDPDir fixes dp/ only,
// the device plugins' directory).
func dpFiles(store *devinfo.Store) ([]string, error) {
	dir := filepath.Join(store.Dir, devinfo.KindDP)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list device-info files: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") { // not a write in progress
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// owner finds the resource with the longest file name prefix matching name,
// and the device ID in the name.
func owner(resources []*resource, name string) (*resource, string) {
	rest, ok := strings.CutSuffix(name, "-device.json")
	if !ok {
		return nil, ""
	}
	var best *resource
	var id string
	for _, r := range resources {
		prefix := strings.ReplaceAll(r.name, "/", "-") + "-"
		if rem, ok := strings.CutPrefix(rest, prefix); ok && rem != "" && (best == nil || len(rem) < len(id)) {
			best, id = r, rem
		}
	}
	return best, id
}

// describes reports whether info is what a source of kind writes for device
// id (see the sources' Info functions).
func describes(kind, id string, info *devinfo.DeviceInfo) bool {
	socketDevice := func(path string) bool {
		return filepath.Base(path) == id || filepath.Base(filepath.Dir(path)) == id
	}
	switch kind {
	case "pci":
		return info.Type == devinfo.TypePCI && info.Pci != nil && info.Pci.PciAddress == id
	case "netdevs":
		return info.Type == devinfo.TypePCI && info.Pci != nil
	case "vdpa":
		return info.Type == devinfo.TypeVDPA && info.Vdpa != nil && info.Vdpa.ParentDevice == id
	case "vhostuser":
		return info.Type == devinfo.TypeVhostUser && info.VhostUser != nil && socketDevice(info.VhostUser.Path)
	case "memif":
		return info.Type == devinfo.TypeMemif && info.Memif != nil && socketDevice(info.Memif.Path)
	}
	return false
}
