package images

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// BuildPlatforms writes, for each platform, the tarballs a node of it imports and one
// OCI layout per image listing every platform's image; a platform it cannot build for
// is an error that says what to give.
func TestBuildPlatforms(t *testing.T) {
	host := "linux/" + runtime.GOARCH
	out := t.TempDir()
	layouts, err := BuildPlatforms(PlatformOptions{Options: Options{Root: testenv.ModuleRoot(), Out: out}, Platforms: []string{host}})
	must(t, err)
	for name, ref := range map[string]string{"devplumb": DevplumbRef, "netdev-dp": NetdevDPRef} {
		img := readImage(t, filepath.Join(out, "linux-"+runtime.GOARCH, name+".tar"), ref)
		if img.files["/usr/local/bin/"+name] == nil {
			t.Errorf("%s image lacks its binary", name)
		}
		p, err := layout.FromPath(layouts[name])
		must(t, err)
		idx, err := p.ImageIndex()
		must(t, err)
		m, err := idx.IndexManifest()
		must(t, err)
		if len(m.Manifests) != 1 || m.Manifests[0].Platform == nil || m.Manifests[0].Platform.String() != host {
			t.Errorf("%s layout index: %+v", name, m.Manifests)
		}
	}

	for _, c := range []struct{ platform, want string }{
		{"linux/arm64", "-busybox linux/arm64=PATH"},
		{"windows/amd64", `platform "windows/amd64": want linux/ARCH`},
		{"linux/mips", "linux/mips"},
	} {
		o := PlatformOptions{Options: Options{Root: testenv.ModuleRoot(), Out: t.TempDir()}, Platforms: []string{c.platform}}
		if c.platform == "linux/mips" {
			o.BusyboxFor = map[string]string{"linux/mips": "/bin/busybox"}
		}
		if _, err := BuildPlatforms(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.platform, err, c.want)
		}
	}
}
