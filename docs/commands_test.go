package docs

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// makeVar is the value of a Makefile variable `NAME := value` or `NAME ?= value`.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*[:?]?=\s*(.*)$`).FindStringSubmatch(readDoc(t, "Makefile"))
	if m == nil {
		t.Fatalf("Makefile sets no %s", name)
	}
	return strings.TrimSpace(m[1])
}

// binaries are what `make build` builds: the Makefile's CMDS.
func binaries(t *testing.T) []string {
	t.Helper()
	return strings.Fields(makeVar(t, "CMDS"))
}

// helpOf runs bin args... --help and says whether it exited 0.
func helpOf(dir, bin string, args ...string) (string, bool) {
	cmd := exec.Command(filepath.Join(dir, bin), append(args, "--help")...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

var (
	// helpFlag is a flag in a --help text: the flag package's "  -name" lines
	// and usage lines' "--name" or "[--name".
	helpFlag = regexp.MustCompile(`(?:^|[\s\[(|])--?([a-z][a-z0-9-]*)`)
	// docFlag is a flag a document gives a command.
	docFlag = regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
)

// cli is what each binary's --help says it takes.
type cli struct {
	dir   string
	bins  []string
	cmds  map[string][]string // binary -> its subcommand paths ("gc", "pod add")
	flags map[string][]string // "binary path" -> its flags
}

// loadCLI builds the binaries and reads every binary's and subcommand's --help,
// which must exit 0.
func loadCLI(t *testing.T) *cli {
	t.Helper()
	c := &cli{bins: binaries(t), cmds: map[string][]string{}, flags: map[string][]string{}}
	var pkgs []string
	for _, b := range c.bins {
		pkgs = append(pkgs, "./cmd/"+b)
	}
	c.dir = testenv.Build(t, pkgs...)
	for _, b := range c.bins {
		help, ok := helpOf(c.dir, b)
		if !ok {
			t.Errorf("%s --help: exit not 0:\n%s", b, help)
		}
		c.flags[b] = flagsIn(help)
		c.cmds[b] = commandsIn(b, help)
		for _, p := range c.cmds[b] {
			sub, ok := helpOf(c.dir, b, strings.Fields(p)...)
			if !ok && !strings.Contains(p, " ") {
				t.Errorf("%s %s --help: exit not 0:\n%s", b, p, sub)
			}
			if ok {
				c.flags[b+" "+p] = flagsIn(sub)
			}
		}
	}
	return c
}

func flagsIn(help string) []string {
	var flags []string
	for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
		if !slices.Contains(flags, m[1]) {
			flags = append(flags, m[1])
		}
	}
	return flags
}

// commandsIn are the subcommand paths a top-level --help lists in its usage
// lines ("  nodesim pod add --root DIR": "pod" and "pod add").
func commandsIn(bin, help string) []string {
	line := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(bin) + `((?: [a-z][a-z-]*)+)`)
	var paths []string
	for _, m := range line.FindAllStringSubmatch(help, -1) {
		words := strings.Fields(m[1])
		for i := range words {
			if p := strings.Join(words[:i+1], " "); !slices.Contains(paths, p) {
				paths = append(paths, p)
			}
		}
	}
	return paths
}

// use is one command line a document gives: a binary, the words after it up
// to the first flag or placeholder, and its flags.
type use struct {
	bin   string
	words []string
	flags []string
}

// usesIn finds the binaries' command lines in a snippet: a binary's name
// (bin/devplumbctl and /usr/local/bin/devplumb-agent too) where a command
// starts, up to the end of its command (|, &, ;, #, a closing parenthesis
// or quote).
func usesIn(bins []string, text string) []use {
	var uses []use
	for _, b := range bins {
		re := regexp.MustCompile(`(?:^|\s)([\w./-]*/)?` + regexp.QuoteMeta(b) + `(\s[^|&;#)"']*|$)`)
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			if !commandStart(text[:m[0]]) {
				continue
			}
			u := use{bin: b}
			rest := text[m[4]:m[5]]
			for _, w := range strings.Fields(rest) {
				if !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(w) {
					break
				}
				u.words = append(u.words, w)
			}
			for _, f := range docFlag.FindAllStringSubmatch(rest, -1) {
				u.flags = append(u.flags, f[1])
			}
			uses = append(uses, u)
		}
	}
	return uses
}

// commandStart says whether a word after before starts a command: it is the
// first, or follows a shell separator, "--" (kubectl exec), sudo, env, time
// or a variable assignment.
func commandStart(before string) bool {
	words := strings.Fields(before)
	if len(words) == 0 {
		return true
	}
	last := words[len(words)-1]
	return strings.ContainsAny(last[len(last)-1:], "|&;(") || strings.Contains(last, "=") ||
		slices.Contains([]string{"--", "$", "sudo", "env", "time", "exec"}, last)
}

// check says what is wrong with a use: a subcommand the binary lacks, or a
// flag its (sub)command's --help does not list.
func (c *cli) check(u use) []string {
	key := u.bin
	if cmds := c.cmds[u.bin]; len(cmds) > 0 && len(u.words) > 0 {
		if !slices.Contains(cmds, u.words[0]) {
			return []string{fmt.Sprintf("%s has no subcommand %q (it has %s)", u.bin, u.words[0], strings.Join(cmds, ", "))}
		}
		for i := len(u.words); i > 0; i-- {
			if _, ok := c.flags[u.bin+" "+strings.Join(u.words[:i], " ")]; ok {
				key = u.bin + " " + strings.Join(u.words[:i], " ")
				break
			}
		}
	}
	var errs []string
	for _, f := range u.flags {
		if f != "help" && f != "version" && !slices.Contains(c.flags[key], f) {
			errs = append(errs, fmt.Sprintf("`%s` has no flag --%s (%s --help)", key, f, key))
		}
	}
	return errs
}

// otherTools are flags the documents give other tools in a code span of their
// own, with the tool: any other lone --flag must be one of devplumb's.
var otherTools = map[string]string{"set": "helm", "platform": "docker buildx", "depth": "git clone", "make-shared": "mount"}

// Every binary, subcommand and flag the user documents name in their code
// is one the binaries' --help lists, and every binary's and subcommand's
// --help exits 0.
func TestDocsNameTheBinariesFlags(t *testing.T) {
	c := loadCLI(t)
	var all []string
	for _, fs := range c.flags {
		all = append(all, fs...)
	}
	for _, doc := range userDocs(t) {
		for _, s := range snippets(doc, readDoc(t, doc)) {
			for _, u := range usesIn(c.bins, s.text) {
				for _, e := range c.check(u) {
					t.Errorf("%s:%d: %s, in %q", s.doc, s.line, e, s.text)
				}
			}
			if m := regexp.MustCompile(`^--([a-z][a-z0-9-]*)`).FindStringSubmatch(s.text); m != nil &&
				!slices.Contains(all, m[1]) && otherTools[m[1]] == "" {
				t.Errorf("%s:%d: no binary takes --%s", s.doc, s.line, m[1])
			}
		}
	}
}

// Every `bin/NAME` a user document names is a binary `make build` makes, or
// one of the other things make puts in bin/.
func TestDocsNameBuiltBinaries(t *testing.T) {
	known := append(binaries(t), "cni", "images", "release", "vswitch", "kubeapi", "bench-passthrough")
	re := regexp.MustCompile(`(?:^|[\s(` + "`" + `])bin/([A-Za-z0-9_.-]+)`)
	for _, doc := range userDocs(t) {
		for i, line := range strings.Split(readDoc(t, doc), "\n") {
			for _, m := range re.FindAllStringSubmatch(line, -1) {
				if !slices.Contains(known, m[1]) {
					t.Errorf("%s:%d: bin/%s is not made by make (make build makes %s)", doc, i+1, m[1], strings.Join(binaries(t), ", "))
				}
			}
		}
	}
}

var numberWords = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}

// Every `make TARGET` a user document names is a target of the Makefile, and a
// count of what `make build` makes is len(CMDS).
func TestDocsNameMakeTargets(t *testing.T) {
	makefile := readDoc(t, "Makefile")
	target := regexp.MustCompile(`(?:^|[\s(|&;])make ([a-z][a-z0-9-]*)`)
	count := regexp.MustCompile(`make build\b.*?\b(` + strings.Join(numberWords, "|") + `)\b`)
	want := numberWords[len(binaries(t))]
	for _, doc := range userDocs(t) {
		text := readDoc(t, doc)
		for _, s := range snippets(doc, text) {
			for _, m := range target.FindAllStringSubmatch(s.text, -1) {
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `:`).MatchString(makefile) {
					t.Errorf("%s:%d: make %s: the Makefile has no such target", doc, s.line, m[1])
				}
			}
		}
		for i, line := range strings.Split(text, "\n") {
			if m := count.FindStringSubmatch(line); m != nil && m[1] != want {
				t.Errorf("%s:%d: says make build makes %s; it makes %s (CMDS)", doc, i+1, m[1], want)
			}
		}
	}
}
