package protocol

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// script writes a shell script that prints out and exits with status; it
// also records the CDI_* environment it got in a file beside it.
func script(t *testing.T, out string, status int) *Binary {
	t.Helper()
	dir := t.TempDir()
	body := "#!/bin/sh\nenv | grep ^CDI_ | sort > " + filepath.Join(dir, "env") + "\ncat > " + filepath.Join(dir, "stdin") +
		"\ncat <<'EOF'\n" + out + "\nEOF\nexit " + string(rune('0'+status)) + "\n"
	path := filepath.Join(dir, "plugin")
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Binary{Path: path, Config: []byte(ttyConf), Type: "tty"}
}

func TestCallerGoodReplies(t *testing.T) {
	ctx := context.Background()
	b := script(t, `{"cdiVersion": "0.0.1", "devices": ["/dev/tty13"], "numa_locality": [0]}`, 0)
	r, err := b.Add(ctx, "0.0.1", []Amount{{"tty", 1}}, "r1", []int{0, 1})
	if err != nil || r.Devices[0] != "/dev/tty13" || r.NUMALocality[0] != 0 {
		t.Fatalf("ADD: %+v %v", r, err)
	}
	env, _ := os.ReadFile(filepath.Join(filepath.Dir(b.Path), "env"))
	want := "CDI_COMMAND=ADD\nCDI_REQUEST=tty:1\nCDI_REQUEST_ID=r1\nCDI_REQUEST_NUMA_LOCALITY=0,1\nCDI_VERSION=0.0.1\n"
	if string(env) != want {
		t.Errorf("env:\n%s\nwant\n%s", env, want)
	}
	if stdin, _ := os.ReadFile(filepath.Join(filepath.Dir(b.Path), "stdin")); string(stdin) != ttyConf {
		t.Errorf("stdin %q", stdin)
	}
	b = script(t, `{"cdiVersion": "0.0.1", "tty": 32, "tty-serial": 4}`, 0)
	if info, err := b.Info(ctx, "0.0.1"); err != nil || info["tty"] != 32 || info["tty-serial"] != 4 {
		t.Errorf("INFO: %v %v", info, err)
	}
	b = script(t, `{"cdiVersion": "0.0.1", "code": 5, "msg": "Unknown request ID"}`, 0)
	if logged, err := b.Del(ctx, "0.0.1", "r1"); err != nil || logged == nil || logged.Code != 5 {
		t.Errorf("DEL with a logged error: %v %v", logged, err)
	}
	b = script(t, ``, 0)
	if logged, err := b.Del(ctx, "0.0.1", "r1"); err != nil || logged != nil {
		t.Errorf("silent DEL: %v %v", logged, err)
	}
	b = script(t, `{"cdiVersion": "0.0.2", "supportedVersions": ["0.0.1", "0.0.2"]}`, 0)
	if v, err := b.Version(ctx); err != nil || len(v.SupportedVersions) != 2 {
		t.Errorf("VERSION: %v %v", v, err)
	}
}

func TestCallerErrorReplies(t *testing.T) {
	ctx := context.Background()
	for _, out := range []string{
		`{"cdiVersion": "0.0.1", "code": 4, "msg": "resource-spec unsupported", "details": "Unsupported resource-spec: gpu-memory"}`,
		`{"cdiVersion": "0.0.1", "error": 4, "message": "resource-spec unsupported"}`,
	} {
		_, err := script(t, out, 1).Add(ctx, "0.0.1", []Amount{{"tty", 1}}, "r1", nil)
		var e *Error
		if !errors.As(err, &e) || e.Code != 4 || e.Message != "resource-spec unsupported" {
			t.Errorf("%s: %v", out, err)
		}
	}
}

// TestCallerRefusesBrokenReplies: a reply that breaks the draft is an
// error, not a result.
func TestCallerRefusesBrokenReplies(t *testing.T) {
	ctx := context.Background()
	add := func(b *Binary) error { _, err := b.Add(ctx, "0.0.1", []Amount{{"tty", 1}}, "r1", nil); return err }
	info := func(b *Binary) error { _, err := b.Info(ctx, "0.0.1"); return err }
	del := func(b *Binary) error { _, err := b.Del(ctx, "0.0.1", "r1"); return err }
	version := func(b *Binary) error { _, err := b.Version(ctx); return err }
	for _, c := range []struct {
		name, out string
		status    int
		call      func(*Binary) error
		want      string
	}{
		{"ADD without devices", `{"cdiVersion": "0.0.1"}`, 0, add, "no devices"},
		{"ADD without cdiVersion", `{"devices": []}`, 0, add, "cdiVersion"},
		{"ADD in another version", `{"cdiVersion": "0.0.2", "devices": []}`, 0, add, "cdiVersion"},
		{"ADD relative device", `{"cdiVersion": "0.0.1", "devices": ["tty1"]}`, 0, add, "absolute"},
		{"ADD not JSON", `devices: /dev/tty1`, 0, add, "not the draft's JSON"},
		{"ADD failing without a reply", `oops`, 1, add, "without an error reply"},
		{"ADD error without cdiVersion", `{"code": 4, "msg": "x"}`, 1, add, "without an error reply"},
		{"INFO of another type", `{"cdiVersion": "0.0.1", "tty": 1, "gpu": 2}`, 0, info, `"gpu"`},
		{"INFO without its type", `{"cdiVersion": "0.0.1", "tty-serial": 1}`, 0, info, "does not mention"},
		{"INFO amount not an integer", `{"cdiVersion": "0.0.1", "tty": 1.5}`, 0, info, "not an integer"},
		{"INFO negative", `{"cdiVersion": "0.0.1", "tty": -1}`, 0, info, "negative"},
		{"DEL failing", `{"cdiVersion": "0.0.1", "code": 5, "msg": "Unknown request ID"}`, 1, del, "must not fail"},
		{"DEL printing junk", `done`, 0, del, "no error reply"},
		{"VERSION failing", `{"cdiVersion": "0.0.1", "code": 3, "msg": "no"}`, 1, version, "must not fail"},
		{"VERSION without supportedVersions", `{"cdiVersion": "0.0.1"}`, 0, version, "supportedVersions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call(script(t, c.out, c.status))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want it to say %q", err, c.want)
			}
		})
	}
}

func TestCallerTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plugin")
	os.WriteFile(path, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755)
	b := &Binary{Path: path, Config: []byte(ttyConf), Type: "tty", Timeout: 100 * time.Millisecond}
	if _, err := b.Info(context.Background(), "0.0.1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want a deadline", err)
	}
}
