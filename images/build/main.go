// Command build writes the project's images as docker-archive tarballs without Docker:
//
//	go run ./images/build [-o DIR] [-busybox PATH] [-version VERSION]
//	go run ./images/build -platforms linux/amd64,linux/arm64 -busybox linux/arm64=PATH [-o DIR] [-version VERSION]
//
// -version is stamped into the binaries as `make build` stamps its VERSION, and is the
// images' tag (devplumb:VERSION, netdev-dp:VERSION); `make images` passes its VERSION.
// Without it the binaries are unstamped and the images tagged "dev".
//
// then `docker load -i DIR/devplumb.tar` or `ctr -n k8s.io images import DIR/devplumb.tar`.
// With -platforms: DIR/<os>-<arch>/<name>.tar per platform and DIR/oci/<name>, an OCI
// layout holding every platform's image (`crane push DIR/oci/devplumb REGISTRY/devplumb:TAG`).
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/devplumb/devplumb/images"
)

// busyboxes is the repeatable -busybox flag: PATH for this machine, PLATFORM=PATH for others.
type busyboxes struct {
	host string
	by   map[string]string
}

func (b *busyboxes) String() string { return b.host }

func (b *busyboxes) Set(v string) error {
	if plat, path, ok := strings.Cut(v, "="); ok {
		b.by[plat] = path
		return nil
	}
	b.host = v
	return nil
}

func main() {
	out := flag.String("o", "bin/images", "output directory")
	bb := &busyboxes{host: "/bin/busybox", by: map[string]string{}}
	flag.Var(bb, "busybox", "a static busybox (Debian: busybox-static): PATH for this machine, PLATFORM=PATH for another")
	platforms := flag.String("platforms", "", "comma-separated os/arch[/variant] list; empty: this machine's, as DIR/<name>.tar")
	version := flag.String("version", "", "the version stamped into the binaries (make build's VERSION) and the images' tag; empty: unstamped, tagged dev")
	flag.Parse()
	if err := build(*out, *platforms, *version, bb); err != nil {
		fmt.Fprintln(os.Stderr, "build images:", err)
		os.Exit(1)
	}
}

func build(out, platforms, version string, bb *busyboxes) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	o := images.Options{Root: root, Out: out, Busybox: bb.host, Version: version}
	var built map[string]string
	if platforms == "" {
		built, err = images.Build(o)
	} else {
		built, err = images.BuildPlatforms(images.PlatformOptions{Options: o,
			Platforms: strings.Split(platforms, ","), BusyboxFor: bb.by})
	}
	for _, k := range slices.Sorted(maps.Keys(built)) {
		fmt.Printf("%s\t%s\n", k, built[k])
	}
	return err
}
