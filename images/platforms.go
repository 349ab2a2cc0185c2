package images

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/devplumb/devplumb/images/imagebuild"
)

// PlatformOptions say what BuildPlatforms builds and from what.
type PlatformOptions struct {
	Options
	// Platforms are os/arch[/variant], e.g. linux/amd64, linux/arm64 (Go's GOOS/GOARCH).
	Platforms []string
	// BusyboxFor is a static busybox per platform other than this machine's (Debian:
	// `apt-get download busybox-static:arm64`, then `dpkg-deb -x`); this machine's
	// platform uses Options.Busybox.
	BusyboxFor map[string]string
}

// BuildPlatforms builds the images for every platform: under o.Out, per platform
// <os>-<arch>[-<variant>]/<name>.tar (docker-archive, for `ctr images import` on a node
// of that platform), and per image oci/<name>, an OCI layout whose index holds the
// image of every platform (for pushing as one multi-platform image). It returns the
// layouts' directories by image name.
func BuildPlatforms(o PlatformOptions) (map[string]string, error) {
	if len(o.Platforms) == 0 {
		return nil, fmt.Errorf("images: no platform given")
	}
	if o.Busybox == "" {
		o.Busybox = "/bin/busybox"
	}
	if _, _, err := Refs(o.Version); err != nil {
		return nil, err // before minutes of compiling
	}
	byName := map[string][]imagebuild.Spec{}
	for _, ps := range o.Platforms {
		specs, err := buildPlatform(o, ps)
		if err != nil {
			return nil, err
		}
		for name, spec := range specs {
			byName[name] = append(byName[name], spec)
		}
	}
	out := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		dir := filepath.Join(o.Out, "oci", name)
		if err := imagebuild.WriteIndex(byName[name], dir); err != nil {
			return nil, err
		}
		out[name] = dir
	}
	return out, nil
}

// buildPlatform compiles the commands for one platform and writes its tarballs.
func buildPlatform(o PlatformOptions, ps string) (map[string]imagebuild.Spec, error) {
	plat, err := v1.ParsePlatform(ps)
	if err != nil || plat.OS != "linux" || plat.Architecture == "" {
		return nil, fmt.Errorf("images: platform %q: want linux/ARCH[/VARIANT], e.g. linux/arm64", ps)
	}
	if err := imagebuild.KnownArch(plat.Architecture); err != nil {
		return nil, fmt.Errorf("images: platform %s: %w", ps, err)
	}
	busybox := o.Busybox
	if plat.Architecture != runtime.GOARCH {
		if busybox = o.BusyboxFor[ps]; busybox == "" {
			return nil, fmt.Errorf("images: platform %s: the devplumb image needs a static busybox for it "+
				"(-busybox %s=PATH; Debian: apt-get download busybox-static:%s)", ps, ps, plat.Architecture)
		}
	}
	dir := filepath.Join(o.Out, strings.ReplaceAll(ps, "/", "-"))
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	env := []string{"GOOS=" + plat.OS, "GOARCH=" + plat.Architecture}
	if plat.Architecture == "arm" && plat.Variant != "" {
		env = append(env, "GOARM="+strings.TrimPrefix(plat.Variant, "v"))
	}
	if err := goBuild(o.Root, bin, o.Version, env, commandsOf(o.Root)...); err != nil {
		return nil, err
	}
	specs, err := specsFor(o.Root, bin, busybox, o.Busybox, o.Version, *plat)
	if err != nil {
		return nil, fmt.Errorf("images: platform %s: %w", ps, err)
	}
	for file, spec := range specs {
		if err := imagebuild.Write(spec, filepath.Join(dir, file+".tar")); err != nil {
			return nil, err
		}
	}
	return specs, nil
}
