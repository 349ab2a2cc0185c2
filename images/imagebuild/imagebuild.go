// Package imagebuild writes container images without Docker or a registry: a root
// filesystem described file by file becomes one layer, the image a docker-archive tarball
// (what `docker load` and `ctr images import` read), made with go-containerregistry.
// Every file has a fixed owner and time, so the same inputs give the same image.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of an image's root filesystem. Exactly one of Source (a host file
// copied in), Data, Link (a symlink's target) or Dir is set.
type File struct {
	Path   string // absolute, in the image
	Mode   fs.FileMode
	Source string
	Data   []byte
	Link   string
	Dir    bool
	UID    int
	GID    int
}

// Spec is one image: its reference (as it is tagged), its files and its config.
type Spec struct {
	Ref        string // e.g. "devplumb:dev"
	Files      []File
	Entrypoint []string
	Cmd        []string
	User       string // "uid:gid"
	Env        []string
	// Platform the image runs on; zero: linux and the architecture of this build.
	Platform v1.Platform
}

// platform is s.Platform with its defaults.
func (s Spec) platform() v1.Platform {
	p := s.Platform
	if p.OS == "" {
		p.OS = "linux"
	}
	if p.Architecture == "" {
		p.Architecture = runtime.GOARCH
	}
	return p
}

// epoch is every file's time: images are reproducible.
var epoch = time.Unix(0, 0).UTC()

// Write builds the image of spec and writes it to tarPath as a docker-archive tarball.
func Write(spec Spec, tarPath string) error {
	img, tag, err := Image(spec)
	if err != nil {
		return err
	}
	tmp := tarPath + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("imagebuild: write %s: %w", tarPath, err)
	}
	if err := os.Rename(tmp, tarPath); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	return nil
}

// Image builds the image of spec in memory: one layer, for spec's platform.
func Image(spec Spec) (v1.Image, name.Tag, error) {
	tag, err := name.NewTag(spec.Ref)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("imagebuild: reference %q: %w", spec.Ref, err)
	}
	layerTar, err := Layer(spec.Files)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("imagebuild: %s: %w", spec.Ref, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("imagebuild: %s layer: %w", spec.Ref, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("imagebuild: %s: %w", spec.Ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("imagebuild: %s: %w", spec.Ref, err)
	}
	cf = cf.DeepCopy()
	p := spec.platform()
	cf.OS, cf.Architecture, cf.Variant, cf.Created = p.OS, p.Architecture, p.Variant, v1.Time{Time: epoch}
	cf.Config = v1.Config{Entrypoint: spec.Entrypoint, Cmd: spec.Cmd, User: spec.User,
		Env: append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, spec.Env...), WorkingDir: "/"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("imagebuild: %s config: %w", spec.Ref, err)
	}
	return img, tag, nil
}

// Layer is the tar of files, parents first, each directory a path needs added (0755).
func Layer(files []File) ([]byte, error) {
	all, err := withParents(files)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range all {
		if err := writeEntry(tw, f); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func withParents(files []File) ([]File, error) {
	byPath := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("image path %q is not a clean absolute file path", f.Path)
		}
		if _, dup := byPath[f.Path]; dup {
			return nil, fmt.Errorf("image path %s given twice", f.Path)
		}
		byPath[f.Path] = f
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Dir: true, Mode: 0o755}
			}
		}
	}
	out := make([]File, 0, len(byPath))
	for _, f := range byPath {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func writeEntry(tw *tar.Writer, f File) error {
	mode := int64(f.Mode.Perm())
	if f.Mode&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	h := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), Mode: mode, Uid: f.UID, Gid: f.GID,
		ModTime: epoch, Format: tar.FormatPAX}
	data := f.Data
	switch {
	case f.Dir:
		h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
	case f.Link != "":
		h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
	case f.Source != "":
		b, err := os.ReadFile(f.Source)
		if err != nil {
			return err
		}
		data = b
		fallthrough
	default:
		h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// CheckStatic returns an error for a file that is not a statically linked ELF binary: an
// image without libc cannot run anything else.
func CheckStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the image has no libc", p)
		}
	}
	return nil
}

// machines are the ELF machines of the Go architectures images are built for.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
	"ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
}

// CheckArch returns an error for a file that is not an ELF binary for arch (a Go
// GOARCH): an image must not carry a binary its platform cannot run.
func CheckArch(p, arch string) error {
	if err := KnownArch(arch); err != nil {
		return err
	}
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	if want := machines[arch]; f.Machine != want {
		return fmt.Errorf("%s is a %v binary, not one for %s", p, f.Machine, arch)
	}
	return nil
}

// KnownArch returns an error for a Go architecture images are not built for.
func KnownArch(arch string) error {
	if _, ok := machines[arch]; !ok {
		return fmt.Errorf("architecture %q: not one images are built for (%s)", arch, strings.Join(archs(), ", "))
	}
	return nil
}

func archs() []string {
	out := make([]string, 0, len(machines))
	for a := range machines {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Busybox is a root filesystem of a static busybox (bin) with a link for each applet it
// lists, a passwd and group file with root, nobody and nonroot (65532, as distroless),
// and /tmp.
func Busybox(bin string) ([]File, error) { return BusyboxListed(bin, bin) }

// BusyboxListed is Busybox for a busybox of any architecture, bin, with the applets
// that listFrom (one that runs here) lists: a busybox built for another architecture
// cannot run here, and Debian's busybox-static has the same applets on every
// architecture of a release.
func BusyboxListed(bin, listFrom string) ([]File, error) {
	for _, b := range []string{bin, listFrom} {
		if err := CheckStatic(b); err != nil {
			return nil, fmt.Errorf("busybox: %w (Debian: apt-get install busybox-static)", err)
		}
	}
	out, err := runList(listFrom)
	if err != nil {
		return nil, err
	}
	files := append(BaseFiles(), File{Path: "/bin/busybox", Mode: 0o755, Source: bin})
	seen := map[string]bool{"/bin/busybox": true}
	for _, applet := range strings.Fields(out) {
		p := "/bin/" + applet
		if strings.Contains(applet, "/") || seen[p] {
			continue
		}
		seen[p] = true
		files = append(files, File{Path: p, Link: "busybox"})
	}
	return files, nil
}

// BaseFiles are what a distroless static image has besides the binary: users, groups
// and a world-writable /tmp.
func BaseFiles() []File {
	return []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{Path: "/tmp", Dir: true, Mode: 0o777 | fs.ModeSticky},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
	}
}
