package images

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/devplumb/devplumb/images/imagebuild"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// instruction is one Dockerfile instruction with continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, COPY, RUN, ...
	args []string
	line int
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		f := strings.Fields(cur.String())
		out = append(out, instruction{cmd: strings.ToUpper(f[0]), args: f[1:], line: start})
		cur.Reset()
	}
	must(t, sc.Err())
	return out
}

// stage is the instructions of one FROM ... up to the next.
type stage struct {
	name string
	ins  []instruction
}

func stages(ins []instruction) []stage {
	var out []stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			s := stage{}
			_, args := flags(in.args)
			if len(args) == 3 && strings.EqualFold(args[1], "AS") {
				s.name = args[2]
			}
			out = append(out, s)
		}
		if len(out) > 0 {
			out[len(out)-1].ins = append(out[len(out)-1].ins, in)
		}
	}
	return out
}

// flags splits COPY's --flag=value options from its sources and destination.
func flags(args []string) (map[string]string, []string) {
	fl := map[string]string{}
	for len(args) > 0 && strings.HasPrefix(args[0], "--") {
		k, v, _ := strings.Cut(strings.TrimPrefix(args[0], "--"), "=")
		fl[k] = v
		args = args[1:]
	}
	return fl, args
}

// TestImagesAreWhatTheDockerfilesDescribe builds the images as `make images` does (Build:
// static binaries, docker-archive tarballs, no Docker) and checks them against the
// Dockerfiles, which describe the same images for Docker users: the same entrypoint,
// command and non-root user, every file the final stage copies present (executables
// executable, binaries static), the Go version the module's, and nothing the build needs
// excluded from the Docker build context. The images are built with a version, as
// `make images` builds them: tagged with it, their binaries built as `make build`
// builds them (checkStamped).
func TestImagesAreWhatTheDockerfilesDescribe(t *testing.T) {
	root := testenv.ModuleRoot()
	tars, err := Build(Options{Root: root, Out: t.TempDir(), Version: testVersion})
	must(t, err)
	dpRef, ndRef, err := Refs(testVersion)
	must(t, err)
	for name, ref := range map[string]string{"devplumb": dpRef, "netdev-dp": ndRef} {
		t.Run(name, func(t *testing.T) {
			df := filepath.Join(root, "images", name, "Dockerfile")
			st := stages(parseDockerfile(t, df))
			if len(st) != 2 || st[0].name != "build" {
				t.Fatalf("%s: want a build stage and a final stage, got %d stages", df, len(st))
			}
			checkGoVersion(t, df, root)
			checkCrossBuild(t, df, st[0])
			checkNotIgnored(t, root, readIgnore(t, df+".dockerignore"), buildArgs(st[0]))
			img := readImage(t, tars[ref], ref)
			checkConfig(t, df, st[1], img)
			checkFiles(t, df, st[1], img)
			checkStamped(t, img, name)
			if name == "devplumb" { // the entry point's fallback, beside it, and the node agent
				checkStamped(t, img, "devplumb-direct")
				checkStamped(t, img, "devplumb-agent")
			}
		})
	}
}

// checkCrossBuild: the build stage runs on the builder's platform and every go build
// compiles for the target's, so `docker buildx build --platform ...` makes each image
// with binaries its platform runs (and fast, without emulation).
func checkCrossBuild(t *testing.T, df string, build stage) {
	t.Helper()
	fl, _ := flags(build.ins[0].args)
	if fl["platform"] != "$BUILDPLATFORM" {
		t.Errorf("%s:%d: the build stage runs on %q, want --platform=$BUILDPLATFORM", df, build.ins[0].line, fl["platform"])
	}
	args := map[string]bool{}
	builds := 0
	for _, in := range build.ins {
		switch {
		case in.cmd == "ARG":
			for _, a := range in.args {
				args[a] = true
			}
		case in.cmd == "RUN" && slices.Contains(in.args, "build"):
			builds++
			if !slices.Contains(in.args, "GOOS=$TARGETOS") || !slices.Contains(in.args, "GOARCH=$TARGETARCH") {
				t.Errorf("%s:%d: go build without GOOS=$TARGETOS GOARCH=$TARGETARCH builds for the builder", df, in.line)
			}
		}
	}
	if !args["TARGETOS"] || !args["TARGETARCH"] || builds == 0 {
		t.Errorf("%s: the build stage must declare ARG TARGETOS TARGETARCH and go build with them", df)
	}
}

// buildArgs are the words of the build stage's go build commands.
func buildArgs(build stage) []string {
	var out []string
	for _, in := range build.ins {
		if in.cmd == "RUN" && slices.Contains(in.args, "build") {
			out = append(out, in.args...)
		}
	}
	return out
}

// image is a built image read back from its tarball.
type image struct {
	cfg   v1.Config
	files map[string]*tar.Header
	dir   string // regular files extracted here, by image path
}

func readImage(t *testing.T, path, ref string) *image {
	t.Helper()
	tag, err := name.NewTag(ref)
	must(t, err)
	img, err := tarball.ImageFromPath(path, &tag)
	must(t, err)
	cf, err := img.ConfigFile()
	must(t, err)
	out := &image{cfg: cf.Config, files: map[string]*tar.Header{}, dir: t.TempDir()}
	layers, err := img.Layers()
	must(t, err)
	for _, l := range layers {
		rc, err := l.Uncompressed()
		must(t, err)
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			must(t, err)
			p := "/" + strings.TrimSuffix(h.Name, "/")
			out.files[p] = h
			if h.Typeflag == tar.TypeReg {
				dst := filepath.Join(out.dir, p)
				must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
				b, err := io.ReadAll(tr)
				must(t, err)
				must(t, os.WriteFile(dst, b, 0o644))
			}
		}
		rc.Close()
	}
	return out
}

// checkConfig: ENTRYPOINT, CMD and USER of the final stage are the image's, and the
// user is not root.
func checkConfig(t *testing.T, df string, final stage, img *image) {
	t.Helper()
	var entry, cmd []string
	user := ""
	for _, in := range final.ins {
		switch in.cmd {
		case "ENTRYPOINT":
			entry = execForm(t, df, in)
		case "CMD":
			cmd = execForm(t, df, in)
		case "USER":
			user = in.args[0]
		}
	}
	if !slices.Equal(img.cfg.Entrypoint, entry) || !slices.Equal(img.cfg.Cmd, cmd) || img.cfg.User != user {
		t.Errorf("%s: entrypoint %q cmd %q user %q, the built image has %q %q %q", df, entry, cmd, user,
			img.cfg.Entrypoint, img.cfg.Cmd, img.cfg.User)
	}
	if u, _, _ := strings.Cut(img.cfg.User, ":"); u == "" || u == "0" || u == "root" {
		t.Errorf("image runs as %q, want a non-root user", img.cfg.User)
	}
	if h := img.files[img.cfg.Entrypoint[0]]; h == nil || h.Mode&0o111 == 0 {
		t.Errorf("entrypoint %s is not an executable of the image", img.cfg.Entrypoint[0])
	}
}

func execForm(t *testing.T, df string, in instruction) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(strings.Join(in.args, " ")), &out); err != nil {
		t.Fatalf("%s:%d: %s is not in exec form: %v", df, in.line, in.cmd, err)
	}
	return out
}

// checkFiles: every file the final stage copies is in the image, executables with an
// executable mode, and the binaries built in the build stage static.
func checkFiles(t *testing.T, df string, final stage, img *image) {
	t.Helper()
	for _, in := range final.ins {
		if in.cmd != "COPY" {
			continue
		}
		fl, paths := flags(in.args)
		src, dst := paths[:len(paths)-1], paths[len(paths)-1]
		for _, s := range src {
			d := dst
			if strings.HasSuffix(dst, "/") {
				d = dst + filepath.Base(s)
			}
			h := img.files[d]
			if h == nil {
				t.Errorf("%s:%d: %s is not in the image", df, in.line, d)
				continue
			}
			if fl["chmod"] != "" && fmt.Sprintf("%04o", h.Mode&0o7777) != fl["chmod"] {
				t.Errorf("%s:%d: %s has mode %04o, the Dockerfile says %s", df, in.line, d, h.Mode&0o7777, fl["chmod"])
			}
			if fl["from"] != "" {
				if h.Mode&0o111 == 0 {
					t.Errorf("%s: binary %s is not executable", df, d)
				}
				if err := imagebuild.CheckStatic(filepath.Join(img.dir, d)); err != nil {
					t.Error(err)
				}
			}
		}
	}
}

func checkGoVersion(t *testing.T, df, root string) {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	must(t, err)
	var want string
	for _, l := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			want = strings.TrimSpace(v)
		}
	}
	for _, in := range parseDockerfile(t, df) {
		if in.cmd == "ARG" && strings.HasPrefix(in.args[0], "GO_VERSION=") {
			if got := strings.TrimPrefix(in.args[0], "GO_VERSION="); got != want {
				t.Errorf("%s:%d: GO_VERSION %s, go.mod needs go %s (the golang image has GOTOOLCHAIN=local)", df, in.line, got, want)
			}
			return
		}
	}
	t.Errorf("%s: no ARG GO_VERSION", df)
}

// checkNotIgnored: no Go or embedded file of the main module that the build needs is
// excluded from the build context.
func checkNotIgnored(t *testing.T, root string, ignore []string, buildArgs []string) {
	t.Helper()
	var pkgs []string
	for _, a := range buildArgs {
		if strings.HasPrefix(a, "./") {
			pkgs = append(pkgs, a)
		}
	}
	list := exec.Command("go", append([]string{"list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`},
		pkgs...)...)
	list.Dir = root
	b, err := list.Output()
	must(t, err)
	files := append(strings.Fields(string(b)), filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum"))
	for _, f := range files {
		rel, err := filepath.Rel(root, f)
		must(t, err)
		if ignored(ignore, rel) {
			t.Errorf("%s is needed by the build but excluded from the build context", rel)
		}
	}
}

func readIgnore(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// ignored applies the patterns this repository uses: a path (or a directory above it),
// and **/glob matching a file name anywhere.
func ignored(patterns []string, rel string) bool {
	for _, p := range patterns {
		if g, ok := strings.CutPrefix(p, "**/"); ok {
			if m, _ := filepath.Match(g, filepath.Base(rel)); m {
				return true
			}
			continue
		}
		for d := rel; d != "." && d != "/"; d = filepath.Dir(d) {
			if m, _ := filepath.Match(p, d); m {
				return true
			}
		}
	}
	return false
}
