package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

const ttyConf = `{"cdiVersion": "0.0.1", "name": "TTYs", "type": "tty", "plugin": "generic-tty"}`

const addOK = "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=r1"

// counting counts the calls that reach the plugin.
type counting struct {
	calls int
	info  map[string]int64
	devs  []string
}

func (c *counting) Info(*Request) (map[string]int64, error) { c.calls++; return c.info, nil }
func (c *counting) Add(*Request) (*AddResult, error) {
	c.calls++
	return &AddResult{Devices: c.devs}, nil
}
func (c *counting) Del(*Request) error { c.calls++; return nil }

// TestBadInput: every malformed call is a well-known error code, exit 1
// (0 for DEL), and never reaches the plugin, so nothing changes.
func TestBadInput(t *testing.T) {
	for _, c := range []struct {
		name, env, conf string
		code, exit      int
	}{
		{"no CDI_VERSION", "CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=r1", ttyConf, 1, 1},
		{"unsupported CDI_VERSION", "CDI_VERSION=9.9.9 CDI_COMMAND=INFO", ttyConf, 1, 1},
		{"no command", "CDI_VERSION=0.0.1", ttyConf, 3, 1},
		{"unknown command", "CDI_VERSION=0.0.1 CDI_COMMAND=CHECK", ttyConf, 3, 1},
		{"config version unsupported", "CDI_VERSION=0.0.1 CDI_COMMAND=INFO", strings.Replace(ttyConf, "0.0.1", "0.1.0", 1), 2, 1},
		{"config version differs", "CDI_VERSION=0.0.2 CDI_COMMAND=INFO", ttyConf, 2, 1},
		{"config not JSON", "CDI_VERSION=0.0.1 CDI_COMMAND=INFO", "{", 2, 1},
		{"config without plugin", "CDI_VERSION=0.0.1 CDI_COMMAND=INFO", `{"cdiVersion": "0.0.1", "name": "x", "type": "tty"}`, 2, 1},
		{"config type against ABNF", "CDI_VERSION=0.0.1 CDI_COMMAND=INFO", strings.Replace(ttyConf, `"tty"`, `"t-ty"`, 1), 4, 1},
		{"config args not an object", "CDI_VERSION=0.0.1 CDI_COMMAND=INFO", strings.Replace(ttyConf, `}`, `, "args": [1]}`, 1), 2, 1},
		{"no CDI_REQUEST", "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST_ID=r1", ttyConf, 4, 1},
		{"malformed CDI_REQUEST", "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty CDI_REQUEST_ID=r1", ttyConf, 4, 1},
		{"amount not an integer", "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:1.5 CDI_REQUEST_ID=r1", ttyConf, 4, 1},
		{"amount with unit", "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:2Ki CDI_REQUEST_ID=r1", ttyConf, 4, 1},
		{"other resource-type", "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:1 CDI_REQUEST_ID=r1", ttyConf, 4, 1},
		{"unsupported subtype", "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty-serial:1 CDI_REQUEST_ID=r1", ttyConf, 4, 1},
		{"no request-id", "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:1", ttyConf, 5, 1},
		{"request-id against ABNF", "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=-r1", ttyConf, 5, 1},
		{"request-id too long", "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=" + strings.Repeat("a", 65), ttyConf, 5, 1},
		{"bad NUMA locality", addOK + " CDI_REQUEST_NUMA_LOCALITY=zero", ttyConf, 4, 1},
		{"DEL without request-id", "CDI_VERSION=0.0.1 CDI_COMMAND=DEL", ttyConf, 5, 0},
		{"DEL with bad request-id", "CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=a_b", ttyConf, 5, 0},
		{"DEL without CDI_VERSION", "CDI_COMMAND=DEL CDI_REQUEST_ID=r1", ttyConf, 1, 0},
		{"DEL with a bad config", "CDI_VERSION=0.0.1 CDI_COMMAND=del CDI_REQUEST_ID=r1", "{", 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &counting{info: map[string]int64{"tty": 1}}
			got, raw, exit := serve(t, p, c.env, c.conf)
			if got["error"] != float64(c.code) || got["code"] != float64(c.code) || exit != c.exit {
				t.Errorf("got %s exit %d; want code %d exit %d", raw, exit, c.code, c.exit)
			}
			if got["cdiVersion"] == nil || got["message"] == nil || got["message"] != got["msg"] {
				t.Errorf("error reply lacks a key: %s", raw)
			}
			if p.calls != 0 {
				t.Errorf("the plugin ran for a bad call")
			}
		})
	}
}

func TestCommandCaseInsensitive(t *testing.T) {
	for _, cmd := range []string{"info", "Info", "iNfO"} {
		got, raw, exit := serve(t, &counting{info: map[string]int64{"tty": 3}}, "CDI_VERSION=0.0.1 CDI_COMMAND="+cmd, ttyConf)
		if exit != 0 || got["tty"] != 3.0 {
			t.Errorf("%s: %s exit %d", cmd, raw, exit)
		}
	}
	if _, raw, exit := serve(t, &counting{}, "CDI_COMMAND=version", "not even JSON"); exit != 0 || !strings.Contains(raw, "supportedVersions") {
		t.Errorf("version: %s exit %d", raw, exit)
	}
}

// TestPluginRulesEnforced: a plugin that advertises another type or
// returns no devices cannot make the handler break the draft.
func TestPluginRulesEnforced(t *testing.T) {
	got, raw, exit := serve(t, &counting{info: map[string]int64{"tty": 1, "gpu": 2}}, "CDI_VERSION=0.0.1 CDI_COMMAND=INFO", ttyConf)
	if exit != 1 || got["code"] != float64(FirstPluginCode) || !strings.Contains(raw, `\"gpu\"`) {
		t.Errorf("foreign INFO: %s exit %d", raw, exit)
	}
	_, raw, exit = serve(t, &counting{info: map[string]int64{"tty-serial": 1}}, "CDI_VERSION=0.0.1 CDI_COMMAND=INFO", ttyConf)
	if exit != 1 {
		t.Errorf("INFO without the type itself: %s exit %d", raw, exit)
	}
	got, raw, exit = serve(t, &counting{}, "CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:0 CDI_REQUEST_ID=r1", ttyConf)
	if exit != 0 || got["devices"] == nil || len(got["devices"].([]any)) != 0 {
		t.Errorf("empty ADD: %s exit %d; want devices: []", raw, exit)
	}
}

func TestErrorKeyPairs(t *testing.T) {
	for _, in := range []string{
		`{"cdiVersion": "0.0.1", "code": 5, "msg": "Unknown request ID"}`,
		`{"cdiVersion": "0.0.1", "error": 5, "message": "Unknown request ID"}`,
		`{"cdiVersion": "0.0.1", "error": 5, "msg": "Unknown request ID"}`,
	} {
		var e Error
		if err := json.Unmarshal([]byte(in), &e); err != nil || e.Code != 5 || e.Message != "Unknown request ID" {
			t.Errorf("%s: %+v %v", in, e, err)
		}
	}
	var e Error
	if err := json.Unmarshal([]byte(`{"cdiVersion": "0.0.1", "devices": []}`), &e); err == nil {
		t.Error("a reply without an error code read as an error")
	}
	out, _ := json.Marshal(NewError(4, "m", "d"))
	if string(out) != `{"cdiVersion":"","error":4,"message":"m","code":4,"msg":"m","details":"d"}` {
		t.Errorf("written as %s", out)
	}
}
