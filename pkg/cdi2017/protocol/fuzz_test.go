package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseRequest: whatever ParseRequest accepts is valid by the ABNF and
// formats back to a request that parses to the same.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"gpu:1", "gpu:1,gpu-memory:2048", "gpu:1,gpu-memory:2048Mi", "tty:03", "a-b:+1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseRequest(s)
		if err != nil {
			return
		}
		for _, a := range got {
			if _, _, err := SplitResourceSpec(a.Spec); err != nil || a.Amount < 0 {
				t.Fatalf("%q accepted with %+v", s, a)
			}
		}
		again, err := ParseRequest(FormatRequest(got))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("%q: round trip %v -> %v, %v", s, got, again, err)
		}
	})
}

// FuzzServe: any environment and stdin get a JSON reply with cdiVersion (or
// nothing, for a successful DEL), exit 0 or 1, and DEL and VERSION exit 0.
func FuzzServe(f *testing.F) {
	f.Add("ADD", "0.0.1", "tty:1", "r1", "", ttyConf)
	f.Add("del", "0.0.1", "", "r1", "", ttyConf)
	f.Add("VERSION", "", "", "", "", "")
	f.Add("INFO", "0.999", "", "", "", "{")
	f.Add("ADD", "0.0.1", "tty:x", "-", "0,a", ttyConf)
	f.Fuzz(func(t *testing.T, cmd, ver, req, id, numa, stdin string) {
		vars := map[string]string{EnvCommand: cmd, EnvVersion: ver, EnvRequest: req, EnvRequestID: id, EnvNUMALocality: numa}
		var out bytes.Buffer
		p := &counting{info: map[string]int64{"tty": 1}, devs: []string{"/dev/tty1"}}
		code := Handler{Plugin: p}.Serve(func(k string) string { return vars[k] }, strings.NewReader(stdin), &out)
		upper := strings.ToUpper(cmd)
		if code != 0 && code != 1 || (code != 0 && (upper == CmdDel || upper == CmdVersion)) {
			t.Fatalf("exit %d for %q", code, cmd)
		}
		if out.Len() == 0 {
			if upper != CmdDel || code != 0 {
				t.Fatalf("no reply for %q exit %d", cmd, code)
			}
			return
		}
		var m map[string]any
		if err := json.Unmarshal(out.Bytes(), &m); err != nil || m["cdiVersion"] == nil {
			t.Fatalf("reply %q: %v", out.String(), err)
		}
	})
}
