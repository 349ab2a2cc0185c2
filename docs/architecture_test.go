// Package docs holds the project's documentation. Its tests keep the user
// documents (README.md, docs/, CONTRIBUTING.md, the READMEs of cmd/, e2e/ and
// deployments/) from drifting: every binary, subcommand, flag and make target
// they name against the binaries' --help and the Makefile (commands_test.go),
// every relative link and heading anchor, architecture.md's tree against the
// repository, and every pinned version against go.mod, the build scripts, the
// chart and README's supported table, whose rows name the commit that passed
// (versions_test.go), and every key of netdev-dp's, the network and the node
// config against their references (configkeys_test.go).
package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// treeDirs reads the directories named in architecture.md's tree block: a
// line's leading names ending in "/", nested by two spaces of indentation.
func treeDirs(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dirs, stack []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			if in {
				break
			}
			in = true
			continue
		}
		if !in {
			continue
		}
		depth := (len(line) - len(strings.TrimLeft(line, " "))) / 2
		names := leadingDirs(line)
		if len(names) == 0 {
			continue
		}
		stack = stack[:min(depth, len(stack))]
		for _, n := range names {
			dirs = append(dirs, filepath.Join(append(slices.Clone(stack), n)...))
		}
		stack = append(stack, names[0])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return dirs
}

// leadingDirs are the words a tree line starts with that end in "/".
func leadingDirs(line string) []string {
	var names []string
	for _, w := range strings.Fields(line) {
		if !strings.HasSuffix(w, "/") {
			break
		}
		names = append(names, strings.TrimSuffix(w, "/"))
	}
	return names
}

// goPackageDirs are the directories under pkg/ holding Go files.
func goPackageDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, f := range testenv.Files(t, "../pkg") {
		dir := filepath.Join("pkg", filepath.Dir(f))
		if strings.HasSuffix(f, ".go") && !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// Every package under pkg/ is in the tree, and every directory the tree names exists.
func TestArchitectureTreeMatchesRepository(t *testing.T) {
	named := treeDirs(t)
	if len(named) < 10 {
		t.Fatalf("architecture.md's tree names %d directories: %v", len(named), named)
	}
	for _, d := range goPackageDirs(t) {
		if !slices.Contains(named, d) {
			t.Errorf("package %s is missing from docs/architecture.md's tree", d)
		}
	}
	for _, d := range named {
		if st, err := os.Stat(filepath.Join("..", d)); err != nil || !st.IsDir() {
			t.Errorf("docs/architecture.md's tree names %s, which is not a directory", d)
		}
	}
}

// mdLink is a Markdown link: [text](target).
var mdLink = regexp.MustCompile(`\[([^]]*)\]\(([^)#\s]+)[^)]*\)`)

// goTestName is a link text naming a Go test, fuzz target or benchmark.
var goTestName = regexp.MustCompile(`^(Test|Fuzz|Benchmark)[A-Za-z0-9_]+$`)

// Every relative link of the repository's Markdown files reaches a file or
// directory, and a link named after a Go test reaches the file defining it.
func TestMarkdownLinksResolve(t *testing.T) {
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != ".." && strings.HasPrefix(d.Name(), ".") || d.IsDir() && d.Name() == "bin" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			checkLink(t, p, m[1], m[2])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkLink checks one link of the Markdown file md.
func checkLink(t *testing.T, md, text, target string) {
	t.Helper()
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(md), target))
	if err != nil {
		if _, serr := os.Stat(filepath.Join(filepath.Dir(md), target)); serr != nil {
			t.Errorf("%s links to %s, which does not exist", md, target)
		}
		return
	}
	if goTestName.MatchString(text) && !strings.Contains(string(b), "func "+text+"(") {
		t.Errorf("%s links %s to %s, which does not define it", md, text, target)
	}
}
