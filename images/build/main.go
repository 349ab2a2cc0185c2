// Command build writes the project's images as docker-archive tarballs without Docker:
//
//	go run ./images/build [-o DIR] [-busybox PATH]
//
// then `docker load -i DIR/devplumb.tar` or `ctr -n k8s.io images import DIR/devplumb.tar`.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"

	"github.com/devplumb/devplumb/images"
)

func main() {
	out := flag.String("o", "bin/images", "output directory")
	busybox := flag.String("busybox", "/bin/busybox", "a static busybox (Debian: busybox-static)")
	flag.Parse()
	root, err := os.Getwd()
	if err == nil {
		var tars map[string]string
		tars, err = images.Build(images.Options{Root: root, Out: *out, Busybox: *busybox})
		refs := make([]string, 0, len(tars))
		for r := range tars {
			refs = append(refs, r)
		}
		sort.Strings(refs)
		for _, r := range refs {
			fmt.Printf("%s\t%s\n", r, tars[r])
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "build images:", err)
		os.Exit(1)
	}
}
