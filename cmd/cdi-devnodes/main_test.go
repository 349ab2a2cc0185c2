package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestHelpAndVersionExitZero: run by hand, --help prints the usage and
// --version the build, both exiting 0 as every binary does.
func TestHelpAndVersionExitZero(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{arg}, env(nil), strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Errorf("%s: exit %d, want 0", arg, code)
		}
		if !strings.Contains(stderr.String(), "CDI_COMMAND") || !strings.Contains(stderr.String(), "-version") || stdout.Len() != 0 {
			t.Errorf("%s: stdout %q, stderr %q, want the usage on stderr only", arg, stdout.String(), stderr.String())
		}
	}
	var stdout bytes.Buffer
	if code := run([]string{"--version"}, env(nil), strings.NewReader(""), &stdout, &bytes.Buffer{}); code != 0 || !strings.HasPrefix(stdout.String(), "cdi-devnodes ") {
		t.Errorf("--version: exit %d, printed %q", code, stdout.String())
	}
	if code := run([]string{"--bogus"}, env(nil), strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("--bogus: exit %d, want 2", code)
	}
}

// TestDraftCallsUnchanged: a call of the draft is served as before, with or
// without arguments, and one without CDI_COMMAND gets the draft's error reply.
func TestDraftCallsUnchanged(t *testing.T) {
	var stdout bytes.Buffer
	if code := run([]string{"--help"}, env(map[string]string{protocol.EnvCommand: protocol.CmdVersion}), strings.NewReader(""), &stdout, &bytes.Buffer{}); code != 0 {
		t.Fatalf("VERSION: exit %d", code)
	}
	var v protocol.VersionReply
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil || len(v.SupportedVersions) == 0 {
		t.Errorf("VERSION reply %q: %v", stdout.String(), err)
	}
	stdout.Reset()
	if code := run(nil, env(nil), strings.NewReader(""), &stdout, &bytes.Buffer{}); code != 1 {
		t.Errorf("no CDI_COMMAND: exit %d, want the draft's error exit 1", code)
	}
	var e protocol.Error
	if err := json.Unmarshal(stdout.Bytes(), &e); err != nil || e.Code == 0 {
		t.Errorf("no CDI_COMMAND: reply %q (%v), want the draft's error reply", stdout.String(), err)
	}
}
