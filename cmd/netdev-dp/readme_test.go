package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeSynopsisHasEveryFlag: the synopses in README.md (the code blocks
// of netdev-dp command lines) name every flag --help lists, and no other.
func TestReadmeSynopsisHasEveryFlag(t *testing.T) {
	var help bytes.Buffer
	if code := run([]string{"--help"}, io.Discard, &help); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(help.String(), -1) {
		flags = append(flags, m[1])
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var synopsis []string
	for i, block := range strings.Split(string(readme), "```") {
		if i%2 == 1 && strings.HasPrefix(strings.TrimSpace(block), "netdev-dp ") {
			for _, m := range regexp.MustCompile(`--([a-z-]+)`).FindAllStringSubmatch(block, -1) {
				synopsis = append(synopsis, m[1])
			}
		}
	}
	if len(flags) < 10 || len(synopsis) == 0 {
		t.Fatalf("found %d flags in --help and %d in the synopses: the test reads them wrong\n%s", len(flags), len(synopsis), help.String())
	}
	for _, f := range flags {
		if !slices.Contains(synopsis, f) {
			t.Errorf("README.md synopsis lacks --%s", f)
		}
	}
	for _, f := range synopsis {
		if !slices.Contains(flags, f) {
			t.Errorf("README.md synopsis names --%s, which netdev-dp does not take", f)
		}
	}
}
