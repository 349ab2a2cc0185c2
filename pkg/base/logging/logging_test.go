package logging

import (
	"bytes"
	"encoding/json"
	"flag"
	"strings"
	"testing"
)

func parse(t *testing.T, args ...string) *Flags {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f := Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestJSONAtDebug(t *testing.T) {
	var buf bytes.Buffer
	log, err := parse(t, "--log-level", "debug", "--log-format", "json").New(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hello", "err", "boom")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %q: %v", buf.String(), err)
	}
	if rec["msg"] != "hello" || rec["err"] != "boom" || rec["level"] != "DEBUG" {
		t.Fatalf("record = %v", rec)
	}
}

func TestDefaultTextDropsDebug(t *testing.T) {
	var buf bytes.Buffer
	log, err := parse(t).New(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("quiet")
	log.Info("loud")
	if strings.Contains(buf.String(), "quiet") || !strings.Contains(buf.String(), "msg=loud") {
		t.Fatalf("text log = %q", buf.String())
	}
}

func TestBadValuesNameTheFlag(t *testing.T) {
	for _, args := range [][]string{{"--log-level", "loud"}, {"--log-format", "xml"}} {
		_, err := parse(t, args...).New(&bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: err = %v, want one naming %s", args, err, args[0])
		}
	}
}
