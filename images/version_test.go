package images

import (
	"bytes"
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// testVersion is the version the images are built with in tests, as `make images`
// passes git describe's: a tag, commits since, the commit, and a dirty checkout.
const testVersion = "v9.8.7-3-gabcdef0-dirty"

// checkStamped: the image's own binary (devplumb, devplumb-direct, devplumb-agent, netdev-dp) is built as
// `make build` builds it: it reports testVersion (devplumb's about string, printed
// without a CNI command; netdev-dp --version), static, -trimpath, and devplumb-direct
// with grpcnotrace.
func checkStamped(t *testing.T, img *image, name string) {
	t.Helper()
	bin := filepath.Join(img.dir, "usr/local/bin", name)
	checkBuildInfo(t, bin, buildTags["./cmd/"+name])
	must(t, os.Chmod(bin, 0o755)) // extracted 0644
	var args []string
	if name == "netdev-dp" || name == "devplumb-agent" {
		args = []string{"--version"}
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{} // no CNI_COMMAND
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // devplumb without a command exits non-zero after its about string
	if !strings.Contains(out.String(), testVersion) {
		t.Errorf("%s does not report version %s: %q", name, testVersion, out.String())
	}
}

// checkBuildInfo: the binary was built static, with -trimpath and exactly the build
// tags tags.
func checkBuildInfo(t *testing.T, bin, tags string) {
	t.Helper()
	bi, err := buildinfo.ReadFile(bin)
	must(t, err)
	set := map[string]string{}
	for _, s := range bi.Settings {
		set[s.Key] = s.Value
	}
	// -ldflags is not recorded with -trimpath (it may hold paths): the version the
	// binary reports checks the stamp, and TestBuildIsMakeBuild the flags.
	if set["CGO_ENABLED"] != "0" || set["-trimpath"] != "true" || set["-tags"] != tags {
		t.Errorf("%s built with %v, want CGO_ENABLED=0, -trimpath and -tags %q", bin, set, tags)
	}
}

// TestBuildIsMakeBuild: the go build commands of the images are the Makefile's build
// target's, flag for flag and package for package (`make -n build`).
func TestBuildIsMakeBuild(t *testing.T) {
	const version = "v1.2.3"
	cmd := exec.Command("make", "-s", "-n", "build", "VERSION="+version, "BIN=OUT", "GO=go")
	cmd.Dir = testenv.ModuleRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	var makes [][]string
	for _, l := range strings.Split(string(out), "\n") {
		if w := shellWords(l); len(w) > 2 && w[0] == "CGO_ENABLED=0" && w[1] == "go" {
			makes = append(makes, w[2:])
		}
	}
	var ours [][]string
	all := []string{"./cmd/devplumb-direct", "./cmd/devplumb-agent", "./cmd/devplumbctl", "./cmd/netdev-dp", "./cmd/nodesim", "./cmd/cdi-devnodes", "./cmd/cdi-adapter", "./cmd/devplumb"}
	for _, group := range byTags(all) {
		ours = append(ours, goBuildArgs(version, buildTags[group[0]], "OUT", group...))
	}
	if got, want := normBuilds(ours), normBuilds(makes); !slices.Equal(got, want) {
		t.Errorf("images build\n  %s\nmake build\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// normBuilds are go build argument lists made comparable: "-ldflags X" as
// "-ldflags=X", the packages after -o DIR sorted, the commands sorted.
func normBuilds(cmds [][]string) []string {
	var s []string
	for _, c := range cmds {
		c = slices.Clone(c)
		for i, a := range c {
			if a == "-ldflags" && i+1 < len(c) { // make's "-ldflags X" is go's "-ldflags=X"
				c = slices.Replace(c, i, i+2, "-ldflags="+c[i+1])
				break
			}
		}
		slices.Sort(c[slices.Index(c, "-o")+2:])
		s = append(s, strings.Join(c, " "))
	}
	slices.Sort(s)
	return s
}

// imageCommands are the main packages each Dockerfile builds.
var imageCommands = map[string][]string{
	"devplumb":  {"./cmd/devplumb", "./cmd/devplumb-direct", "./cmd/devplumb-agent", "./cmd/devplumbctl"},
	"netdev-dp": {"./cmd/netdev-dp"},
}

// TestDockerfilesBuildAsMakeBuild: each Dockerfile's go build commands are the
// Makefile's build target's, flag for flag (static, -trimpath, stripped, the
// build tags, the version stamped from its VERSION build argument), for its
// image's packages; and its base images are pinned by digest.
func TestDockerfilesBuildAsMakeBuild(t *testing.T) {
	root := testenv.ModuleRoot()
	for name, cmds := range imageCommands {
		df := filepath.Join(root, "images", name, "Dockerfile")
		build := stages(parseDockerfile(t, df))[0]
		var ours, theirs [][]string
		for _, group := range byTags(cmds) {
			ours = append(ours, goBuildArgs("${VERSION}", buildTags[group[0]], "/out", group...))
		}
		hasVersion := false
		for _, in := range build.ins {
			hasVersion = hasVersion || in.cmd == "ARG" && slices.Contains(in.args, "VERSION")
			if w := shellWords(strings.Join(in.args, " ")); in.cmd == "RUN" && slices.Contains(w, "build") {
				theirs = append(theirs, w[slices.Index(w, "go")+1:])
			}
		}
		if got, want := normBuilds(theirs), normBuilds(ours); !slices.Equal(got, want) {
			t.Errorf("%s builds\n  %s\nmake build would\n  %s", df, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		if !hasVersion {
			t.Errorf("%s: the build stage declares no ARG VERSION: the binaries would report no version", df)
		}
		checkPinned(t, df)
	}
}

// checkPinned: every FROM of df names an image by digest (a stage name or
// scratch needs none), so a rebuilt tag cannot change what a release builds.
func checkPinned(t *testing.T, df string) {
	t.Helper()
	digest := regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)
	var stagesSeen []string
	for _, in := range parseDockerfile(t, df) {
		if in.cmd != "FROM" {
			continue
		}
		_, args := flags(in.args)
		if ref := args[0]; ref != "scratch" && !slices.Contains(stagesSeen, ref) && !digest.MatchString(ref) {
			t.Errorf("%s:%d: FROM %s is not pinned by digest (@sha256:...)", df, in.line, ref)
		}
		if len(args) == 3 {
			stagesSeen = append(stagesSeen, args[2])
		}
	}
}

// shellWords splits a make -n line or a Dockerfile RUN into words, with '...' and
// "..." quoting (what the Makefile and the Dockerfiles use; no escapes).
func shellWords(l string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	any := false
	for _, r := range l {
		switch {
		case quote == 0 && (r == '\'' || r == '"'):
			quote, any = r, true
		case r == quote:
			quote = 0
		case (r == ' ' || r == '\t') && quote == 0:
			if any {
				out = append(out, cur.String())
			}
			cur.Reset()
			any = false
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if any {
		out = append(out, cur.String())
	}
	return out
}

// A version that cannot be a tag is refused before anything is built.
func TestRefs(t *testing.T) {
	if dp, nd, err := Refs(""); err != nil || dp != DevplumbRef || nd != NetdevDPRef {
		t.Errorf(`Refs(""): %s %s %v`, dp, nd, err)
	}
	if dp, nd, err := Refs("v1.2.3-4-gabc"); err != nil || dp != "devplumb:v1.2.3-4-gabc" || nd != "netdev-dp:v1.2.3-4-gabc" {
		t.Errorf("Refs(v1.2.3-4-gabc): %s %s %v", dp, nd, err)
	}
	for _, bad := range []string{"v1+build", "-x", ".x", strings.Repeat("a", 129), "a b"} {
		if _, err := Build(Options{Root: t.TempDir(), Out: t.TempDir(), Version: bad}); err == nil || !strings.Contains(err.Error(), "cannot be an image tag") {
			t.Errorf("version %q: %v, want refused", bad, err)
		}
	}
}
