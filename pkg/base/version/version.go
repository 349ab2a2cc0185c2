// Package version says which build of devplumb a binary is: what operators
// quote in bug reports and compare across nodes.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set by release builds (make build VERSION=v1.2.3):
//
//	-ldflags "-X github.com/devplumb/devplumb/pkg/version.version=v1.2.3"
//
// Without it the module version and VCS revision the Go toolchain recorded
// in the binary are used.
var version string

// Info is what a binary knows of its own build.
type Info struct {
	Version  string // release version, module version, or "(devel)"
	Revision string // VCS revision, "" when not built from a checkout
	Modified bool   // the checkout had uncommitted changes
	Go       string // toolchain version
}

// Get reads the build information.
func Get() Info {
	info := Info{Version: version, Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if info.Version == "" {
			info.Version = "unknown"
		}
		return info
	}
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one line every binary prints for --version.
func (i Info) String() string {
	s := i.Version
	if i.Revision != "" {
		s += " (" + i.Revision
		if i.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return s + " " + i.Go
}

// Line is "NAME VERSION (REVISION) GOVERSION".
func Line(name string) string {
	return fmt.Sprintf("%s %s", name, Get())
}
