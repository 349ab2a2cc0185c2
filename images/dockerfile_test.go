package images

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
			if len(in.args) == 3 && strings.EqualFold(in.args[1], "AS") {
				s.name = in.args[2]
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

// TestDockerfilesBuildWhatTheyClaim runs each Dockerfile's Go build as written (outside
// Docker, which CI may lack) and checks what the image needs from it: the Go version is
// the module's, the binaries are static, every file copied exists and is not ignored,
// the entrypoint is an executable the image contains, and the image is not root by default.
func TestDockerfilesBuildWhatTheyClaim(t *testing.T) {
	root := testenv.ModuleRoot()
	for _, name := range []string{"devplumb", "netdev-dp"} {
		t.Run(name, func(t *testing.T) {
			df := filepath.Join(root, "images", name, "Dockerfile")
			ignore := readIgnore(t, df+".dockerignore")
			st := stages(parseDockerfile(t, df))
			if len(st) != 2 || st[0].name != "build" {
				t.Fatalf("%s: want a build stage and a final stage, got %d stages", df, len(st))
			}
			checkGoVersion(t, df, root)
			out := runGoBuild(t, root, st[0], ignore)
			checkFinalStage(t, df, root, st[1], out, ignore)
		})
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

// runGoBuild runs the build stage's go build with its environment and flags into a temp
// dir standing in for /out/, after checking that the files it needs are in the context.
func runGoBuild(t *testing.T, root string, build stage, ignore []string) string {
	t.Helper()
	out := t.TempDir()
	ran := false
	for _, in := range build.ins {
		if in.cmd != "RUN" || !slices.Contains(in.args, "build") {
			continue
		}
		// RUN's shell form is /bin/sh -c, run here as it is, with /out/ moved to out.
		script := strings.ReplaceAll(strings.Join(in.args, " "), "/out/", out+"/")
		checkNotIgnored(t, root, ignore, in.args)
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("line %d: %s: %v\n%s", in.line, script, err, b)
		}
		ran = true
	}
	if !ran {
		t.Fatal("build stage runs no go build")
	}
	return out
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

func checkFinalStage(t *testing.T, df, root string, final stage, out string, ignore []string) {
	t.Helper()
	dests := map[string]bool{} // files the image has, and whether they are executable
	user, entry := "", ""
	for _, in := range final.ins {
		switch in.cmd {
		case "COPY":
			fl, paths := flags(in.args)
			src, dst := paths[:len(paths)-1], paths[len(paths)-1]
			for _, s := range src {
				exe := fl["chmod"] != "" && strings.ContainsAny(fl["chmod"][len(fl["chmod"])-1:], "1357")
				p := filepath.Join(root, s)
				if fl["from"] != "" {
					p = filepath.Join(out, strings.TrimPrefix(s, "/out/"))
				} else if ignored(ignore, s) {
					t.Errorf("%s:%d: %s is excluded from the build context", df, in.line, s)
				}
				if st, err := os.Stat(p); err != nil {
					t.Errorf("%s:%d: COPY source %s: %v", df, in.line, s, err)
				} else if fl["from"] != "" {
					exe = st.Mode()&0o111 != 0
					checkStatic(t, p)
				}
				d := dst
				if strings.HasSuffix(dst, "/") {
					d = dst + filepath.Base(s)
				}
				dests[d] = exe
			}
		case "USER":
			user = in.args[0]
		case "ENTRYPOINT":
			entry = strings.Trim(strings.Join(in.args, " "), `[]"`)
			entry, _, _ = strings.Cut(entry, `"`)
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "0" || u == "root" {
		t.Errorf("%s: final image runs as %q, want a non-root USER", df, user)
	}
	if exe, ok := dests[entry]; !ok || !exe {
		t.Errorf("%s: ENTRYPOINT %q is not an executable the image copies in (copied: %v); use COPY --chmod=0755 for scripts", df, entry, dests)
	}
}

// checkStatic fails for an ELF binary that needs a dynamic loader.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked: the image has no libc", filepath.Base(path))
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
