package docs

import (
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/devinfo"
)

// scriptDefault is the default a build script gives NAME: ${NAME:-value}.
func scriptDefault(t *testing.T, script, name string) string {
	t.Helper()
	m := regexp.MustCompile(name + `=\$\{` + name + `:-([^}]+)\}`).FindStringSubmatch(readDoc(t, script))
	if m == nil {
		t.Fatalf("%s gives %s no default", script, name)
	}
	return m[1]
}

// goModVersions are go.mod's go version ("go") and each required module's.
func goModVersions(t *testing.T) map[string]string {
	t.Helper()
	mod := readDoc(t, "go.mod")
	v := map[string]string{"go": regexp.MustCompile(`(?m)^go (\S+)`).FindStringSubmatch(mod)[1]}
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:require\s+)?([a-z0-9.-]+\.[a-z]+/\S+) (v\S+)`).FindAllStringSubmatch(mod, -1) {
		v[m[1]] = m[2]
	}
	return v
}

// supportedRow is a row of README's supported-Kubernetes table.
type supportedRow struct {
	version, passed string
	isDefault       bool
}

// supportedTable reads the table under README's "## Supported Kubernetes".
func supportedTable(t *testing.T) []supportedRow {
	t.Helper()
	readme := readDoc(t, "README.md")
	start := strings.Index(readme, "## Supported Kubernetes")
	if start < 0 {
		t.Fatal(`README.md has no "## Supported Kubernetes"`)
	}
	section := readme[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var rows []supportedRow
	for _, m := range regexp.MustCompile(`(?m)^\| (v\d+\.\d+\.\d+)( \(default\))? \|.*\| ([^|]*) \|$`).FindAllStringSubmatch(section, -1) {
		rows = append(rows, supportedRow{version: m[1], isDefault: m[2] != "", passed: m[3]})
	}
	if len(rows) == 0 {
		t.Fatal("README.md's supported-Kubernetes table has no rows `| vX.Y.Z | what ran | last passed |`")
	}
	return rows
}

// pin is a version the documents state, read by pattern, and what it must be.
type pin struct {
	what    string
	pattern *regexp.Regexp // its last group is the version
	ok      func(string) bool
	truth   string
}

func pins(t *testing.T) []pin {
	mod := goModVersions(t)
	var matrix []string
	for _, r := range supportedTable(t) {
		matrix = append(matrix, r.version)
	}
	appVersion := regexp.MustCompile(`(?m)^appVersion: "?([^"\s]+)`).FindStringSubmatch(readDoc(t, "deployments/helm/devplumb/Chart.yaml"))[1]
	is := func(v string) func(string) bool { return func(s string) bool { return s == v } }
	multus := scriptDefault(t, "scripts/build-multus.sh", "MULTUS_VERSION")
	containerd := scriptDefault(t, "scripts/build-containerd.sh", "CONTAINERD_VERSION")
	return []pin{
		{"Go", regexp.MustCompile(`\b(?:go|Go )(1\.\d+\.\d+)\b`), is(mod["go"]), "go.mod's go " + mod["go"]},
		{"Multus", regexp.MustCompile(`\bMultus(?: thin| thick| thin and thick| thick and thin)? (v\d+\.\d+\.\d+)`), is(multus), "scripts/build-multus.sh's " + multus},
		{"containerd", regexp.MustCompile(`\bcontainerd (v\d+\.\d+\.\d+)`), is(containerd), "scripts/build-containerd.sh's " + containerd},
		{"Kubernetes", regexp.MustCompile(`\b(?:Kubernetes|kube-apiserver|kubelet|kube-scheduler|kube-controller-manager|K8S_VERSION=) ?(v\d+\.\d+\.\d+)`),
			func(s string) bool { return slices.Contains(matrix, s) }, "a row of README's supported table: " + strings.Join(matrix, ", ")},
		{"the device-info spec", regexp.MustCompile(`Device Information Spec(?:ification)? (\d+\.\d+\.\d+)`), is(devinfo.Version), "devinfo.Version " + devinfo.Version},
		{"the release", regexp.MustCompile(`(?:\b(?:devplumb|netdev-dp):|\bVERSION=)(v\d+\.\d+\.\d+)`),
			func(s string) bool { return s == appVersion || s == "v1.2.3" }, "the chart's appVersion " + appVersion + " (or the placeholder v1.2.3)"},
		{"a Go module", regexp.MustCompile(`\b([a-z0-9.-]+\.[a-z]+/[\w./-]+)[ @](v\d+\.\d+\.\d+)`), nil, "go.mod's"},
	}
}

// Every version the user documents pin (Go, Multus, containerd, Kubernetes,
// the device-info spec, the release the manifests name, a Go module) is the
// one go.mod, the build scripts, README's supported table or the chart say.
func TestDocsPinTheBuiltVersions(t *testing.T) {
	mod := goModVersions(t)
	for _, doc := range append(userDocs(t), "Makefile", "e2e/kind/run.sh") {
		text := strings.Join(strings.Fields(readDoc(t, doc)), " ") // a version may follow a line break
		for _, p := range pins(t) {
			for _, m := range p.pattern.FindAllStringSubmatch(text, -1) {
				v := m[len(m)-1]
				if p.ok == nil { // a Go module: checked when go.mod requires it
					if want, ok := mod[m[1]]; ok && want != v {
						t.Errorf("%s: %q: go.mod requires %s %s", doc, m[0], m[1], want)
					}
					continue
				}
				if !p.ok(v) {
					t.Errorf("%s: %q: %s should be %s", doc, m[0], p.what, p.truth)
				}
			}
		}
	}
}

// The default Kubernetes release is one: the Makefile's K8S_VERSION, the
// build scripts' default and the supported table's default row.
func TestDefaultKubernetesIsOne(t *testing.T) {
	want := makeVar(t, "K8S_VERSION")
	for _, s := range []string{"scripts/build-kube-apiserver.sh", "scripts/build-kube-node.sh"} {
		if got := scriptDefault(t, s, "K8S_VERSION"); got != want {
			t.Errorf("%s builds %s by default, the Makefile's K8S_VERSION is %s", s, got, want)
		}
	}
	var defaults []string
	for _, r := range supportedTable(t) {
		if r.isDefault {
			defaults = append(defaults, r.version)
		}
	}
	if len(defaults) != 1 || defaults[0] != want {
		t.Errorf("README's supported table marks %v (default); the Makefile's K8S_VERSION is %s", defaults, want)
	}
}

// passedAt is a "last passed" cell: a date and the commit whose tree passed.
var passedAt = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2}) at ([0-9a-f]{7,40})\b`)

// Each row of the supported table names the date and the commit it last
// passed at, and that commit is in this checkout's history.
func TestSupportedRowsNameTheirCommit(t *testing.T) {
	history := gitHistory(t)
	for _, r := range supportedTable(t) {
		m := passedAt.FindStringSubmatch(r.passed)
		if m == nil {
			t.Errorf("README's supported row %s: last passed %q: want \"YYYY-MM-DD at COMMIT\" (the commit whose tree passed)", r.version, r.passed)
			continue
		}
		if history != nil {
			if err := history(m[2]); err != nil {
				t.Errorf("README's supported row %s: commit %s: %v", r.version, m[2], err)
			}
		}
	}
}

// gitHistory returns a check that a commit is HEAD's or an ancestor of it,
// or nil (saying why) where there is no full history to look in.
func gitHistory(t *testing.T) func(commit string) error {
	shallow, err := exec.Command("git", "-C", "..", "rev-parse", "--is-shallow-repository").Output()
	if err != nil || strings.TrimSpace(string(shallow)) != "false" {
		t.Logf("no full git history here (%v %s): the rows' commits are checked for their form only", err, shallow)
		return nil
	}
	return func(commit string) error {
		out, err := exec.Command("git", "-C", "..", "merge-base", "--is-ancestor", commit, "HEAD").CombinedOutput()
		if err != nil {
			return fmt.Errorf("not in HEAD's history: %v %s", err, out)
		}
		return nil
	}
}

// e2e/kind/run.sh builds the images with the tag the shipped manifests name.
func TestKindBuildsTheManifestsTag(t *testing.T) {
	script := readDoc(t, "e2e/kind/run.sh")
	line := regexp.MustCompile(`(?m)^TAG=\$\(.*\)$`).FindString(script)
	if line == "" || !strings.Contains(script, `images VERSION="$TAG"`) {
		t.Fatal(`e2e/kind/run.sh: want a line TAG=$(...) and make ... images VERSION="$TAG"`)
	}
	out, err := exec.Command("bash", "-c", `REPO=..; `+line+`; printf %s "$TAG"`).Output()
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	for _, f := range []string{"deployments/devplumb-daemonset.yaml", "deployments/netdev-dp-daemonset.yaml"} {
		for _, m := range regexp.MustCompile(`image: (?:devplumb|netdev-dp):(\S+)`).FindAllStringSubmatch(readDoc(t, f), -1) {
			if m[1] != string(out) {
				t.Errorf("%s names %s; e2e/kind/run.sh builds %q", f, m[0], out)
			}
		}
	}
}
