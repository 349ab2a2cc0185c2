package version

import (
	"strings"
	"testing"
)

func TestLineNamesBinaryAndVersion(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v9.8.7"
	line := Line("netdev-dp")
	if !strings.HasPrefix(line, "netdev-dp v9.8.7") || !strings.HasSuffix(line, Get().Go) {
		t.Fatalf("Line = %q, want the name, the release version and the Go version", line)
	}
}

func TestStringShowsRevisionAndModified(t *testing.T) {
	got := Info{Version: "v1.0.0", Revision: "abc123", Modified: true, Go: "go1.26"}.String()
	if got != "v1.0.0 (abc123, modified) go1.26" {
		t.Fatalf("String = %q", got)
	}
	got = Info{Version: "(devel)", Go: "go1.26"}.String()
	if got != "(devel) go1.26" {
		t.Fatalf("String without revision = %q", got)
	}
}

func TestGetFallsBackToBuildInfo(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = ""
	if v := Get().Version; v == "" {
		t.Fatal("Get().Version is empty without a release version; want the module version")
	}
}
