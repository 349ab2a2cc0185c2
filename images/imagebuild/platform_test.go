package imagebuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// tinyBinary cross-compiles a static program for arch (the standard library only, so
// the build is quick).
func tinyBinary(t *testing.T, arch string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tiny-"+arch)
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-mod=mod")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build for %s: %v\n%s", arch, err, b)
	}
	return out
}

// CheckArch tells a binary's architecture from the one asked for.
func TestCheckArch(t *testing.T) {
	arm := tinyBinary(t, "arm64")
	if err := CheckArch(arm, "arm64"); err != nil {
		t.Errorf("arm64 binary as arm64: %v", err)
	}
	if err := CheckArch(arm, "amd64"); err == nil || !strings.Contains(err.Error(), "not one for amd64") {
		t.Errorf("arm64 binary as amd64: %v", err)
	}
	if err := CheckArch(arm, "mips"); err == nil || !strings.Contains(err.Error(), `"mips"`) {
		t.Errorf("unknown architecture: %v", err)
	}
}

// WriteIndex writes one OCI layout whose index lists each platform's image, each
// image's config naming its platform and carrying that platform's binary.
func TestWriteIndex(t *testing.T) {
	var specs []Spec
	for _, arch := range []string{"amd64", "arm64"} {
		specs = append(specs, Spec{Ref: "tiny:dev", Entrypoint: []string{"/tiny"},
			Files:    []File{{Path: "/tiny", Mode: 0o755, Source: tinyBinary(t, arch)}},
			Platform: v1.Platform{OS: "linux", Architecture: arch}})
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := WriteIndex(specs, dir); err != nil {
		t.Fatal(err)
	}
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
	got := map[string]bool{}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if d.Platform == nil || d.Platform.Architecture != cf.Architecture || d.Annotations["org.opencontainers.image.ref.name"] != "tiny:dev" ||
			d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("index entry %+v for an image of %s", d, cf.Architecture)
		}
		got[cf.OS+"/"+cf.Architecture] = true
	}
	if len(m.Manifests) != 2 || !got["linux/amd64"] || !got["linux/arm64"] {
		t.Errorf("index holds %v", got)
	}
	if _, err := os.Stat(dir + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary layout left: %v", err)
	}
}
