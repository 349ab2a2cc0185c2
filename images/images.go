// Package images builds the project's container images without Docker: the static
// binaries, then the same content the Dockerfiles describe, as docker-archive tarballs
// (images/imagebuild). `make images` and the real-node tests (e2e/node) both use Build,
// so the tests run what users get.
package images

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/devplumb/devplumb/images/imagebuild"
)

// The images' references without a version (Options.Version ""): what tests
// build, and what the DaemonSets in deployments/ named before images carried
// the version. `make images` tags them with the version instead (Refs).
const (
	DevplumbRef = "devplumb:dev"
	NetdevDPRef = "netdev-dp:dev"
)

// Commands are the main packages the images contain.
// devplumb (the CNI entry point) never runs without devplumb-direct beside it.
// devplumb-agent (the node agent) is a container of the devplumb DaemonSet.
var Commands = []string{"./cmd/devplumb", "./cmd/devplumb-direct", "./cmd/devplumb-agent", "./cmd/devplumbctl", "./cmd/netdev-dp"}

// direct and agent are the commands a release before the CNI entry point
// (issue 24) lacks: its devplumb was the whole plugin. Build builds such a
// release too (the upgrade test's).
const (
	direct = "./cmd/devplumb-direct"
	agent  = "./cmd/devplumb-agent"
)

// commandsOf are the Commands the tree at root has.
func commandsOf(root string) []string {
	return slices.DeleteFunc(slices.Clone(Commands), func(c string) bool { return !has(root, c) })
}

func has(root, cmd string) bool {
	_, err := os.Stat(filepath.Join(root, cmd))
	return err == nil
}

func hasDirect(root string) bool { return has(root, direct) }

// Options says where things are.
type Options struct {
	Root    string // module root (go.mod)
	Out     string // where the tarballs go: <name>.tar
	Busybox string // a static busybox for the devplumb image's shell; default /bin/busybox
	// Version is stamped into the binaries as `make build` stamps it (its
	// VERSION) and tags the images (Refs); "" builds them unstamped, tagged "dev".
	Version string
}

// Build compiles the commands as `make build` does (static, stripped, stamped with
// o.Version) and writes devplumb.tar and netdev-dp.tar into o.Out. It returns the
// tarballs' paths by reference.
func Build(o Options) (map[string]string, error) {
	if o.Busybox == "" {
		o.Busybox = "/bin/busybox"
	}
	if _, _, err := Refs(o.Version); err != nil {
		return nil, err // before minutes of compiling
	}
	bin := filepath.Join(o.Out, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	if err := goBuild(o.Root, bin, o.Version, nil, commandsOf(o.Root)...); err != nil {
		return nil, err
	}
	specs, err := Specs(o.Root, bin, o.Busybox, o.Version)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for file, spec := range specs {
		p := filepath.Join(o.Out, file+".tar")
		if err := imagebuild.Write(spec, p); err != nil {
			return nil, err
		}
		out[spec.Ref] = p
	}
	return out, nil
}

// GoBuild builds pkgs (relative to root) into dir as `make build` does, without a
// version stamp: static (CGO_ENABLED=0), without local paths (-trimpath), stripped
// (-s -w), and devplumb with its build tags.
func GoBuild(root, dir string, pkgs ...string) error {
	return goBuild(root, dir, "", nil, pkgs...)
}

// goBuild is GoBuild stamping version (when not "") with env added (GOOS, GOARCH
// for another platform): one go build per set of build tags, as the Makefile's.
func goBuild(root, dir, version string, env []string, pkgs ...string) error {
	for _, group := range byTags(pkgs) {
		args := goBuildArgs(version, buildTags[group[0]], dir, group...)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("images: %s: %w\n%s", describe(args), err, out)
		}
	}
	return nil
}

// Specs are the two images (by tarball name) over the binaries in bin, for this
// machine, tagged with version (Refs).
func Specs(root, bin, busybox, version string) (map[string]imagebuild.Spec, error) {
	return specsFor(root, bin, busybox, busybox, version, v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
}

// specsFor are the images for plat over the binaries in bin (built for plat), with
// busybox (for plat) and the applets lister (a busybox that runs here) lists.
func specsFor(root, bin, busybox, lister, version string, plat v1.Platform) (map[string]imagebuild.Spec, error) {
	dpRef, ndRef, err := Refs(version)
	if err != nil {
		return nil, err
	}
	bins := []string{"devplumb", "devplumbctl", "netdev-dp"}
	extra := map[string]bool{"devplumb-direct": hasDirect(root), "devplumb-agent": has(root, agent)}
	for _, b := range []string{"devplumb-direct", "devplumb-agent"} {
		if extra[b] {
			bins = append(bins, b)
		}
	}
	for _, b := range bins {
		if err := imagebuild.CheckStatic(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		if err := imagebuild.CheckArch(filepath.Join(bin, b), plat.Architecture); err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
	}
	// images/devplumb/Dockerfile: busybox for the installer's shell and tools.
	dp, err := imagebuild.BusyboxListed(busybox, lister)
	if err != nil {
		return nil, fmt.Errorf("images: devplumb image: %w", err)
	}
	for _, b := range bins[:2] {
		dp = append(dp, imagebuild.File{Path: "/usr/local/bin/" + b, Mode: 0o755, Source: filepath.Join(bin, b)})
	}
	for _, b := range bins[3:] {
		dp = append(dp, imagebuild.File{Path: "/usr/local/bin/" + b, Mode: 0o755, Source: filepath.Join(bin, b)})
	}
	dp = append(dp, imagebuild.File{Path: "/usr/local/bin/devplumb-install", Mode: 0o755, Source: filepath.Join(root, "images", "devplumb", "install.sh")})
	// images/netdev-dp/Dockerfile: distroless/static, the binary alone.
	nd := append(imagebuild.BaseFiles(),
		imagebuild.File{Path: "/usr/local/bin/netdev-dp", Mode: 0o755, Source: filepath.Join(bin, "netdev-dp")})
	return map[string]imagebuild.Spec{
		"devplumb": {Ref: dpRef, Files: dp, User: "65532:65532", Platform: plat,
			Entrypoint: []string{"/usr/local/bin/devplumb-install"}, Cmd: []string{"run"}},
		"netdev-dp": {Ref: ndRef, Files: nd, User: "65532:65532", Platform: plat,
			Entrypoint: []string{"/usr/local/bin/netdev-dp"}},
	}, nil
}
