package testenv

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// ErrCommitMissing: the repository lacks a commit and could not fetch it.
var ErrCommitMissing = errors.New("commit not in this clone")

// FetchCommit makes sure the git repository at dir has commit (a test that builds
// an earlier release from its source needs it). A shallow clone, the default of
// many CI systems (git clone --depth 1), lacks it: FetchCommit fetches that one
// commit from origin, saying so through logf. ErrCommitMissing when there is no
// origin or origin does not give it.
func FetchCommit(dir, commit string, logf func(format string, args ...any)) error {
	if hasCommit(dir, commit) {
		return nil
	}
	url, err := git(dir, "remote", "get-url", "origin")
	if err != nil {
		return fmt.Errorf("%w: %s, and no origin to fetch it from: %w", ErrCommitMissing, commit, err)
	}
	logf("fetching commit %s from origin %s: this clone lacks it (shallow?)", commit, url)
	if _, err := git(dir, "fetch", "--quiet", "--depth=1", "origin", commit); err != nil {
		return fmt.Errorf("%w: fetch %s from %s: %w", ErrCommitMissing, commit, url, err)
	}
	if !hasCommit(dir, commit) {
		return fmt.Errorf("%w: %s, still missing after a fetch from %s", ErrCommitMissing, commit, url)
	}
	return nil
}

func hasCommit(dir, commit string) bool {
	_, err := git(dir, "cat-file", "-e", commit+"^{commit}")
	return err == nil
}

// git runs git in dir and returns its trimmed output; its stderr is in the error.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
