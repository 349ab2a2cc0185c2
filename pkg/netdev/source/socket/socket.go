// Package socket is the device source that turns a directory of vhost-user
// or memif sockets into devices of one resource. Who creates the socket
// decides what a device is:
//
//   - The host creates it (vhost-user mode "client", memif role "slave": a
//     vswitch made each socket): every unix socket directly in the directory
//     is one device, its ID the file name. The container gets that socket
//     file bind-mounted at the same path, and nothing else of the directory.
//   - The container creates it (vhost-user mode "server", memif role
//     "master"): every subdirectory is one device, its ID the subdirectory
//     name. The container gets the subdirectory mounted read-write at the same
//     path and creates <subdir>/<socketName> in it.
//
// With mountSocketDir, a host-created socket's whole directory is mounted
// instead of the file: the container then sees every socket of the source, but
// keeps a working path when the vswitch re-creates its socket (a bind mount
// of the file would keep pointing at the old one).
//
// The device-info path is the socket's path, identical inside and outside the
// container. A socket (or subdirectory) that is removed, also with its whole
// directory (a vswitch restarting), stays listed as Unhealthy (a pod may hold
// it) and is Healthy again when it is back. The directory is watched with
// fsnotify.
package socket

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/base/dirwatch"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// DefaultSocketName is the socket a container creates in its subdirectory.
const DefaultSocketName = "socket"

// VhostUser configures a vhost-user source.
type VhostUser struct {
	SocketDir  string `json:"socketDir"`
	Mode       string `json:"mode"`                 // "client" or "server"
	SocketName string `json:"socketName,omitempty"` // server mode; default "socket"
	// MountSocketDir mounts socketDir instead of the socket file (client mode).
	MountSocketDir bool `json:"mountSocketDir,omitempty"`
}

// Memif configures a memif source.
type Memif struct {
	SocketDir  string `json:"socketDir"`
	Role       string `json:"role"`                 // "slave" or "master"
	Mode       string `json:"mode,omitempty"`       // "ethernet" (default), "ip"
	SocketName string `json:"socketName,omitempty"` // master role; default "socket"
	// MountSocketDir mounts socketDir instead of the socket file (slave role).
	MountSocketDir bool `json:"mountSocketDir,omitempty"`
}

// Source is a socket directory source.
type Source struct {
	kind        string
	dir         string
	hostCreates bool
	mountDir    bool
	socketName  string
	info        func(path string) *devinfo.DeviceInfo

	mu    sync.Mutex
	known map[string]source.Device // devices seen, kept when removed
}

// NewVhostUser checks c and returns its source.
func NewVhostUser(c VhostUser) (*Source, error) {
	if c.Mode != devinfo.VhostUserModeClient && c.Mode != devinfo.VhostUserModeServer {
		return nil, fmt.Errorf("vhostUser source: mode %q is not %q or %q", c.Mode, devinfo.VhostUserModeClient, devinfo.VhostUserModeServer)
	}
	mode := c.Mode
	s, err := newSource("vhostuser", c.SocketDir, c.Mode == devinfo.VhostUserModeClient, c.SocketName, func(path string) *devinfo.DeviceInfo {
		return &devinfo.DeviceInfo{Type: devinfo.TypeVhostUser, Version: devinfo.Version, VhostUser: &devinfo.VhostDevice{Mode: mode, Path: path}}
	})
	if s != nil {
		s.mountDir = c.MountSocketDir
	}
	return s, err
}

// NewMemif checks c and returns its source.
func NewMemif(c Memif) (*Source, error) {
	if c.Role != "slave" && c.Role != "master" {
		return nil, fmt.Errorf("memif source: role %q is not \"slave\" or \"master\"", c.Role)
	}
	mode := c.Mode
	if mode == "" {
		mode = "ethernet"
	}
	if mode != "ethernet" && mode != "ip" {
		return nil, fmt.Errorf("memif source: mode %q is not \"ethernet\" or \"ip\"", c.Mode)
	}
	role := c.Role
	s, err := newSource("memif", c.SocketDir, c.Role == "slave", c.SocketName, func(path string) *devinfo.DeviceInfo {
		return &devinfo.DeviceInfo{Type: devinfo.TypeMemif, Version: devinfo.Version, Memif: &devinfo.MemifDevice{Role: role, Path: path, Mode: mode}}
	})
	if s != nil {
		s.mountDir = c.MountSocketDir
	}
	return s, err
}

func newSource(kind, dir string, hostCreates bool, socketName string, info func(string) *devinfo.DeviceInfo) (*Source, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%s source: socketDir %q must be an absolute path", kind, dir)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%s source: socketDir %s is not a directory: %v", kind, dir, err)
	}
	if socketName == "" {
		socketName = DefaultSocketName
	}
	if socketName != filepath.Base(socketName) || socketName == ".." {
		return nil, fmt.Errorf("%s source: socketName %q must be a plain file name", kind, socketName)
	}
	return &Source{kind: kind, dir: filepath.Clean(dir), hostCreates: hostCreates, socketName: socketName, info: info, known: map[string]source.Device{}}, nil
}

// Kind is "vhostuser" or "memif".
func (s *Source) Kind() string { return s.kind }

// Scan lists the sockets (host-created) or subdirectories (container-created),
// and as unhealthy those seen before and removed since.
func (s *Source) Scan() ([]source.Device, error) {
	found, err := s.list()
	if err != nil {
		return nil, err
	}
	why := "socket removed"
	if !s.hostCreates {
		why = "socket directory removed"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Nothing deselects an entry that is still there: one not found is gone.
	out := source.KeepVanished(s.known, found, why, func(string) bool { return true })
	s.known = found
	return out, nil
}

// list reads the directory's devices by ID.
func (s *Source) list() (map[string]source.Device, error) {
	found := map[string]source.Device{}
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		// The vswitch removed its socket dir (restarting): its sockets are
		// gone with it; Watch notices when the dir is back.
		return found, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s source: %w", s.kind, err)
	}
	for _, e := range entries {
		path := filepath.Join(s.dir, e.Name())
		switch {
		case s.hostCreates && e.Type()&os.ModeSocket != 0:
			mount := path
			if s.mountDir {
				mount = s.dir
			}
			found[e.Name()] = s.device(e.Name(), mount, path)
		case !s.hostCreates && e.IsDir():
			found[e.Name()] = s.device(e.Name(), path, filepath.Join(path, s.socketName))
		}
	}
	return found, nil
}

func (s *Source) device(id, mount, socket string) source.Device {
	return source.Device{
		Device: deviceplugin.Device{ID: id, Healthy: true, NUMANode: deviceplugin.NoNUMA},
		Info:   s.info(socket),
		Mounts: []source.Mount{{HostPath: mount, ContainerPath: mount}},
	}
}

// Watch calls changed after each change in the socket directory, also when
// the directory itself is removed or created again.
func (s *Source) Watch(ctx context.Context, changed func()) error {
	w, err := dirwatch.New(s.dir)
	if err != nil {
		return fmt.Errorf("%s source: %w", s.kind, err)
	}
	defer w.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("%s source: watcher closed", s.kind)
			}
			c, err := w.Handle(ev)
			if err != nil {
				return fmt.Errorf("%s source: %w", s.kind, err)
			}
			if c != dirwatch.Ignored && !ev.Has(fsnotify.Chmod) {
				changed()
			}
		case _, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("%s source: watcher closed", s.kind)
			}
			changed() // events may have been lost (queue overflow): rescan
		}
	}
}
