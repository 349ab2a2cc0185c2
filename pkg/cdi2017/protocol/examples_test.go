package protocol

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
)

// The draft's /etc/cdi/gpu.d/drm.conf, verbatim.
const drmConf = `{
  "cdiVersion": "0.0.1",
  "name": "DRM GPUs from vendor International Amazing Graphics Inc.",
  "type": "gpu",
  "plugin": "drm",
  "args": {
    "want_device_nodes" : [
      "primary",
      "render"
    ],
    "vendorid_whitelist": [
      "0x1234",
      "0x2345"
    ]
  }
}`

// drm is the draft's example plugin: 12 GPUs, each a card and a render node.
type drm struct {
	calls int
	held  map[string][]string
}

func (d *drm) Info(*Request) (map[string]int64, error) {
	d.calls++
	return map[string]int64{"gpu": 12, "gpu-memory": 65536}, nil
}

func (d *drm) Add(req *Request) (*AddResult, error) {
	d.calls++
	devs := []string{"/dev/dri/card0", "/dev/dri/renderD128"}
	d.held[req.RequestID] = devs
	return &AddResult{Devices: devs}, nil
}

func (d *drm) Del(req *Request) error {
	d.calls++
	if _, ok := d.held[req.RequestID]; !ok {
		return NewError(ErrCodeRequestID, "Unknown request ID", "")
	}
	delete(d.held, req.RequestID)
	return nil
}

func newDRM() *drm { return &drm{held: map[string][]string{}} }

// serve runs one call in process: env as "K=V" words, like env(1).
func serve(t *testing.T, p Plugin, envWords string, stdin string) (map[string]any, string, int) {
	t.Helper()
	vars := map[string]string{}
	for _, w := range strings.Fields(envWords) {
		k, v, _ := strings.Cut(w, "=")
		vars[k] = v
	}
	var out bytes.Buffer
	code := Handler{Plugin: p}.Serve(func(k string) string { return vars[k] }, strings.NewReader(stdin), &out)
	if out.Len() == 0 {
		return nil, "", code
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("output is not JSON: %v: %s", err, out.String())
	}
	return m, out.String(), code
}

// wantReply compares a reply with the draft's example output. An error
// reply must also carry the text's key pair (error, message) with the same
// values as the example's (code, msg).
func wantReply(t *testing.T, got map[string]any, example string) {
	t.Helper()
	var want map[string]any
	if err := json.Unmarshal([]byte(example), &want); err != nil {
		t.Fatal(err)
	}
	if c, ok := want["code"]; ok {
		want = maps.Clone(want)
		want["error"], want["message"] = c, want["msg"]
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reply\n got %v\nwant %v", got, want)
	}
}

func TestDraftErrorExamples(t *testing.T) {
	// 1. `env CDI_VERSION=0.999 /opt/cdi/bin/drm < /etc/cdi/gpu.d/drm.conf`
	d := newDRM()
	got, _, code := serve(t, d, "CDI_VERSION=0.999", drmConf)
	wantReply(t, got, `{"cdiVersion": "0.0.1", "code": 1, "msg": "Incompatible CDI version", "details": "Unsupported version: 0.999"}`)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	// 2. `env CDI_VERSION=0.0.1 CDI_COMMAND=MYCMD ...`
	got, _, code = serve(t, d, "CDI_VERSION=0.0.1 CDI_COMMAND=MYCMD", drmConf)
	wantReply(t, got, `{"cdiVersion": "0.0.1", "code": 3, "msg": "Command unsupported", "details": "Unsupported command: MYCMD"}`)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if d.calls != 0 {
		t.Errorf("plugin called %d times for refused calls", d.calls)
	}
}

func TestDraftVersionExample(t *testing.T) {
	got, _, code := serve(t, newDRM(), "CDI_COMMAND=VERSION", drmConf)
	wantReply(t, got, `{"cdiVersion": "0.0.2", "supportedVersions": [ "0.0.1", "0.0.2" ]}`)
	if code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
}

// TestDraftInfoExample: the example omits CDI_VERSION, which the draft's
// text requires for INFO; with it the output is the example's, without it
// error 1.
func TestDraftInfoExample(t *testing.T) {
	got, _, code := serve(t, newDRM(), "CDI_VERSION=0.0.1 CDI_COMMAND=INFO", drmConf)
	wantReply(t, got, `{"cdiVersion": "0.0.1", "gpu": 12, "gpu-memory": 65536}`)
	if code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	got, _, code = serve(t, newDRM(), "CDI_COMMAND=INFO", drmConf)
	if got["code"] != 1.0 || code != 1 {
		t.Errorf("INFO without CDI_VERSION: %v, exit %d; want error 1, exit 1", got, code)
	}
}

func TestDraftAddExamples(t *testing.T) {
	d := newDRM()
	// 1. `env CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:1 CDI_REQUEST_ID=1234 ...`
	got, _, code := serve(t, d, "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:1 CDI_REQUEST_ID=1234", drmConf)
	wantReply(t, got, `{"cdiVersion": "0.0.1", "devices": ["/dev/dri/card0", "/dev/dri/renderD128"]}`)
	if code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	// 3. `... CDI_REQUEST=gpu:1,gpu-memory:2048Mi CDI_REQUEST_ID=3456 ...`
	got, _, code = serve(t, d, "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:1,gpu-memory:2048Mi CDI_REQUEST_ID=3456", drmConf)
	wantReply(t, got, `{"cdiVersion": "0.0.1", "code": 4, "msg": "resource-spec unsupported", "details": "Unsupported resource-spec: gpu-memory"}`)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if _, held := d.held["3456"]; held {
		t.Error("the failed ADD holds devices")
	}
}

func TestDraftDelExamples(t *testing.T) {
	d := newDRM()
	serve(t, d, "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:1 CDI_REQUEST_ID=1234", drmConf)
	// 1. `env CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=1234 ...`: no output, exit 0
	got, raw, code := serve(t, d, "CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=1234", drmConf)
	if got != nil || raw != "" || code != 0 {
		t.Errorf("DEL 1234: output %q, exit %d; want none, 0", raw, code)
	}
	// 2. `... CDI_REQUEST_ID=3456 ...`: error 5 for the log, exit 0
	got, _, code = serve(t, d, "CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=3456", drmConf)
	wantReply(t, got, `{"cdiVersion": "0.0.1", "code": 5, "msg": "Unknown request ID"}`)
	if code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
}

// The draft's /etc/cdi/tty.d/generic.conf parses; its INFO/ADD examples
// run against the real cdi-devnodes binary in pkg/cdi2017/devnodes.
func TestDraftConfigExamples(t *testing.T) {
	for _, conf := range []string{drmConf, `{
  "cdiVersion": "0.0.1",
  "name": "TTYs",
  "type": "tty",
  "plugin": "generic-tty",
  "args": {
    "num_system_reserved": 12
  }
}`} {
		c, err := ParseConfig([]byte(conf))
		if err != nil {
			t.Fatalf("draft example config refused: %v", err)
		}
		if c.CDIVersion != "0.0.1" || c.Plugin == "" || len(c.Args) == 0 {
			t.Errorf("parsed %+v", c)
		}
	}
}
