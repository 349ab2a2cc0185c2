package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// gitIn runs git in dir as a test identity and returns its output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// release runs make release VERSION=version in dir, without images.
func release(dir, version string) (string, error) {
	cmd := exec.Command("make", "-s", "release", "VERSION="+version)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RELEASE_PLATFORMS=none", "RELEASE_DATE=2026-12-01",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// make release on a throwaway clone of this checkout's HEAD: one commit and an
// annotated tag whose message is the changelog's section, the chart, manifests and
// docs naming the release, CHANGELOG.md's section dated under an empty Unreleased,
// the notes written; the checkout cloned from gets no tag. A version that is not
// vX.Y.Z, a tag that exists and a dirty worktree are refused before anything changes.
func TestReleaseOnAClone(t *testing.T) {
	root := testenv.ModuleRoot()
	dir := filepath.Join(t.TempDir(), "clone")
	gitIn(t, root, "clone", "-q", "--no-hardlinks", root, dir)
	for v, want := range map[string]string{"1.2.3": "is not a release version", "v1.2": "is not a release version"} {
		if out, err := release(dir, v); err == nil || !strings.Contains(out, want) {
			t.Errorf("make release VERSION=%s: %v %s, want a refusal with %q", v, err, out, want)
		}
	}
	if out, err := release(dir, "v9.9.9"); err != nil {
		t.Fatalf("make release VERSION=v9.9.9: %v\n%s", err, out)
	}
	if got := gitIn(t, dir, "log", "-1", "--format=%s"); got != "Release v9.9.9\n" {
		t.Errorf("HEAD is %q, want the release commit", got)
	}
	notes := gitIn(t, dir, "tag", "-l", "--format=%(contents)", "v9.9.9")
	if !strings.HasPrefix(notes, "devplumb v9.9.9 (2026-12-01)") || !strings.Contains(notes, "### Added") {
		t.Errorf("tag v9.9.9's message: %q, want the release notes", notes)
	}
	for file, want := range map[string]string{
		"deployments/helm/devplumb/Chart.yaml": `appVersion: "v9.9.9"`,
		"deployments/devplumb-daemonset.yaml":  "image: devplumb:v9.9.9",
		"deployments/kustomization.yaml":       "newTag: v9.9.9",
		"README.md":                            "make images VERSION=v9.9.9",
		"CHANGELOG.md":                         "## [Unreleased]\n\n## [v9.9.9] - 2026-12-01\n",
		"bin/release/v9.9.9.md":                "# devplumb v9.9.9 (2026-12-01)",
	} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s after the release lacks %q (%v)", file, want, err)
		}
	}
	if out, err := release(dir, "v9.9.9"); err == nil || !strings.Contains(out, "exists already") {
		t.Errorf("a second release v9.9.9: %v %s, want a refusal", err, out)
	}
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("changed"), 0o644)
	if out, err := release(dir, "v9.9.10"); err == nil || !strings.Contains(out, "worktree has changes") {
		t.Errorf("a release from a dirty worktree: %v %s, want a refusal", err, out)
	}
	if tags := gitIn(t, root, "tag", "-l", "v9.9.9"); tags != "" {
		t.Errorf("the checkout cloned from got tag %q", tags)
	}
}
