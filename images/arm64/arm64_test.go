// Package arm64 tests the linux/arm64 release as users get it, on this machine:
// the images `make images PLATFORMS=linux/amd64,linux/arm64` builds, each of
// their binaries started (--version) and their shell, and the unit tests of the
// packages that need no root network namespace, all run as arm64 code under
// Debian's qemu-user-static (qemu-aarch64-static; natively on an arm64 host).
// Without -race: the race detector needs cgo, and cgo an arm64 C toolchain.
package arm64

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// version is what the images are built with, as make images passes git describe's.
const version = "v9.8.7-3-gabcdef0"

// busyboxEnv names the static arm64 busybox for the devplumb image's shell, which
// make test sets from scripts/fetch-busybox.sh.
const busyboxEnv = "DEVPLUMB_ARM64_BUSYBOX"

// unitPackages are the packages whose tests need no root network namespace, no
// CNI plugin and no host path: the parsers, file and state code, the PCI and
// sysfs sources on a fake sysfs, and the kubelet APIs' gRPC servers and clients.
var unitPackages = []string{
	"./podresources", "./pkg/base/atomicfile", "./pkg/base/safefile", "./pkg/base/netshare",
	"./pkg/base/version", "./pkg/cni/config", "./pkg/cni/nodeconfig", "./pkg/cni/attachment",
	"./pkg/cdispec", "./pkg/cdi2017/protocol", "./pkg/netdev/resources", "./pkg/netdev/source/pci",
	"./pkg/netdev/source/sysfs", "./pkg/deviceplugin", "./pkg/kubeletsim/podresourcesserver",
}

// emulator is the command that runs an arm64 binary here: none on an arm64
// host, else qemu-aarch64-static, which must be installed.
func emulator(t *testing.T) []string {
	t.Helper()
	if runtime.GOARCH == "arm64" {
		return nil
	}
	q, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		t.Fatalf("qemu-aarch64-static is not installed (Debian qemu-user-static; scripts/setup-host.sh installs it): %v", err)
	}
	return []string{q}
}

// run starts an arm64 binary with args and an empty environment.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	argv := append(emulator(t), append([]string{bin}, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{}
	out, _ := cmd.CombinedOutput() // devplumb without a CNI command exits non-zero after its about string
	return string(out)
}

// The arm64 images of `make images PLATFORMS=linux/amd64,linux/arm64`: one OCI
// index per image holding both platforms, and in the arm64 tarballs binaries
// that start under arm64 and report the version, and a busybox shell that runs.
func TestArm64Images(t *testing.T) {
	busybox := os.Getenv(busyboxEnv)
	if busybox == "" && runtime.GOARCH != "arm64" {
		t.Fatalf("%s is not set: make test sets it to the arm64 busybox scripts/fetch-busybox.sh linux/arm64 fetches", busyboxEnv)
	}
	out := t.TempDir()
	// What make images PLATFORMS=linux/amd64,linux/arm64 runs (a build without -race).
	build := exec.Command("go", "run", "./images/build", "-o", out, "-version", version,
		"-platforms", "linux/amd64,linux/arm64", "-busybox", "linux/arm64="+busybox)
	build.Dir = testenv.ModuleRoot()
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", build.Args, err, b)
	}
	for img, bins := range map[string][]string{
		"devplumb":  {"devplumb", "devplumb-direct", "devplumb-agent", "devplumbctl"},
		"netdev-dp": {"netdev-dp"},
	} {
		checkIndex(t, filepath.Join(out, "oci", img), "linux/amd64", "linux/arm64")
		dir := extract(t, filepath.Join(out, "linux-arm64", img+".tar"), img+":"+version)
		for _, b := range bins {
			var args []string
			if b != "devplumb" && b != "devplumb-direct" {
				args = []string{"--version"}
			}
			if got := run(t, filepath.Join(dir, "usr/local/bin", b), args...); !strings.Contains(got, version) {
				t.Errorf("arm64 %s %v: %q, want the version %s", b, args, got, version)
			}
		}
	}
	dir := extract(t, filepath.Join(out, "linux-arm64", "devplumb.tar"), "devplumb:"+version)
	if got := run(t, filepath.Join(dir, "bin/busybox"), "sh", "-c", "echo shell ok"); got != "shell ok\n" {
		t.Errorf("the arm64 image's busybox sh: %q", got)
	}
}

// checkIndex: the OCI layout's index holds exactly one image per platform.
func checkIndex(t *testing.T, dir string, platforms ...string) {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range m.Manifests {
		if d.Platform != nil {
			got = append(got, d.Platform.String())
		}
	}
	if strings.Join(got, ",") != strings.Join(platforms, ",") {
		t.Errorf("%s: index of %v, want %v", dir, got, platforms)
	}
}

// extract unpacks the regular files of the docker-archive tarball's image ref
// into a directory, executable, and returns it; the image must be arm64's.
func extract(t *testing.T, path, ref string) string {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	if cf, err := img.ConfigFile(); err != nil || cf.Architecture != "arm64" {
		t.Fatalf("%s: config %v, %v: want architecture arm64", path, cf, err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		unpack(t, tar.NewReader(rc), dir)
		rc.Close()
	}
	return dir
}

func unpack(t *testing.T, tr *tar.Reader, dir string) {
	t.Helper()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		dst := filepath.Join(dir, filepath.Clean("/"+h.Name))
		b, err := io.ReadAll(tr)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(dst), 0o755)
		}
		if err == nil {
			err = os.WriteFile(dst, b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The unit tests of unitPackages, built for arm64 and run as arm64 code.
func TestArm64UnitTests(t *testing.T) {
	args := []string{"test", "-count=1"}
	if e := emulator(t); e != nil {
		args = append(args, "-exec", e[0])
	}
	cmd := exec.Command("go", append(args, unitPackages...)...)
	cmd.Dir = testenv.ModuleRoot()
	cmd.Env = append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("GOARCH=arm64 go test %v: %v\n%s", unitPackages, err, out)
	}
	t.Logf("arm64:\n%s", out)
}
