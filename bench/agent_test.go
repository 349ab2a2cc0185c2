package bench

import (
	"crypto/tls"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

func TestStatusKiB(t *testing.T) {
	status := "Name:\tdevplumbctl\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n"
	kib, err := statusKiB(status, "VmRSS", "VmHWM")
	if err != nil || kib[0] != 40960 || kib[1] != 51200 {
		t.Fatalf("statusKiB = %v, %v; want [40960 51200]", kib, err)
	}
	if _, err := statusKiB(status, "VmSwap"); err == nil || !strings.Contains(err.Error(), "VmSwap") {
		t.Errorf("a missing field: %v, want an error naming it", err)
	}
	if _, err := statusKiB("VmRSS:\tlots kB\n", "VmRSS"); err == nil || !strings.Contains(err.Error(), "VmRSS") {
		t.Errorf("a bad value: %v, want an error naming the field", err)
	}
}

func TestSplitRequests(t *testing.T) {
	counts := map[string]int{"GET pods (metadata)": 110, "PATCH pods (metadata)": 110, "PATCH resourceclaims/status": 3,
		"GET resourceslices": 2, "POST events": 1, kubeapi.Connections: 7}
	reads, writes := splitRequests(counts)
	if reads != 112 || writes != 114 {
		t.Errorf("reads %d, writes %d; want 112, 114 (connections are not requests)", reads, writes)
	}
	if r, w := splitRequests(nil); r != 0 || w != 0 {
		t.Errorf("none: %d, %d", r, w)
	}
	for _, c := range []struct {
		total, calls int
		want         string
	}{{220, 110, "2"}, {150, 110, "1.36"}, {0, 110, "0"}, {11, 110, "0.1"}, {5, 0, "-"}} {
		if got := perCall(c.total, c.calls); got != c.want {
			t.Errorf("perCall(%d, %d) = %q, want %q", c.total, c.calls, got, c.want)
		}
	}
	if got := describeTotal(map[string]int{kubeapi.Connections: 1}); got != "none" {
		t.Errorf("describeTotal of no requests = %q", got)
	}
	if got := describeTotal(map[string]int{"PATCH pods": 110, "GET pods": 110}); got != "220: GET pods 110, PATCH pods 110" {
		t.Errorf("describeTotal = %q", got)
	}
}

func TestRequestKind(t *testing.T) {
	for _, c := range []struct{ method, url, want string }{
		{"GET", "/api/v1/namespaces/bench/pods/pod-0", "GET pods"},
		{"PATCH", "/api/v1/namespaces/bench/pods/pod-0/status", "PATCH pods/status"},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dbench-node&limit=500", "LIST pods spec.nodeName=bench-node"},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dbench-node&watch=true", "WATCH pods spec.nodeName=bench-node"},
		{"GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dn&watch=1", "WATCH resourceslices spec.nodeName=n"},
		{"GET", "/apis/resource.k8s.io/v1/namespaces/bench/resourceclaims?labelSelector=a%3Db", "LIST resourceclaims a=b"},
		{"PATCH", "/apis/resource.k8s.io/v1/namespaces/bench/resourceclaims/c/status", "PATCH resourceclaims/status"},
		{"GET", "/api/v1/nodes/bench-node", "GET nodes"},
		{"GET", "/api/v1/namespaces/bench", "GET namespaces"},
		{"POST", "/apis/events.k8s.io/v1/namespaces/bench/events", "POST events"},
		{"GET", "/apis", "LIST /apis"},
		{"GET", "/version", "LIST /version"},
	} {
		if got := requestKind(httptest.NewRequest(c.method, c.url, nil)); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.method, c.url, got, c.want)
		}
	}
}

// A watch stream arrives in pieces that cut events (and protobuf's length prefixes)
// anywhere: every event is counted once, when its last byte arrives.
func TestEventCounter(t *testing.T) {
	js := `{"type":"ADDED","object":{}}` + "\n" + `{"type":"MODIFIED","object":{}}` + "\n" + `{"type":"DEL`
	c := &eventCounter{}
	if n := c.feed([]byte(js[:10])) + c.feed([]byte(js[10:])); n != 2 {
		t.Errorf("JSON: %d events, want 2", n)
	}
	var pb []byte
	for _, size := range []int{3, 0, 300, 1} {
		pb = binary.BigEndian.AppendUint32(pb, uint32(size))
		pb = append(pb, make([]byte, size)...)
	}
	pb = append(pb, 0, 0) // the next frame's prefix, cut
	for _, cut := range []int{1, 2, 5, 7, 9, 100, len(pb) - 1} {
		c := &eventCounter{protobuf: true}
		n := c.feed(pb[:cut]) + c.feed(pb[cut:])
		if n != 4 {
			t.Errorf("protobuf cut at %d: %d events, want 4", cut, n)
		}
	}
	c = &eventCounter{protobuf: true}
	n := 0
	for i := range pb {
		n += c.feed(pb[i : i+1])
	}
	if n != 4 {
		t.Errorf("protobuf a byte at a time: %d events, want 4", n)
	}
}

func TestTrafficRows(t *testing.T) {
	rows := trafficRows(map[string]traffic{"WATCH pods spec.nodeName=n": {Requests: 1, Bytes: 2048, Events: 3}, "GET pods": {Requests: 2, Bytes: 512}})
	want := [][]string{{"GET pods", "2", "–", "0.5 KiB"}, {"WATCH pods spec.nodeName=n", "1", "3", "2.0 KiB"}}
	if len(rows) != len(want) {
		t.Fatalf("rows %v", rows)
	}
	for i := range want {
		if strings.Join(rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d: %v, want %v", i, rows[i], want[i])
		}
	}
}

func TestCountRecords(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, "attachments")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if total, complete, err := countRecords(state); err != nil || total != 0 || complete != 0 {
		t.Fatalf("empty: %d, %d, %v", total, complete, err)
	}
	files := map[string]string{"a.json": `{"complete":true}`, "b.json": `{"complete":false}`, "c.json": `{}`, "lock": "x"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if total, complete, err := countRecords(state); err != nil || total != 3 || complete != 1 {
		t.Errorf("countRecords = %d, %d, %v; want 3, 1", total, complete, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := countRecords(state); err == nil || !strings.Contains(err.Error(), "d.json") {
		t.Errorf("a torn record: %v, want an error naming it", err)
	}
}

// The proxy passes requests on and counts each kind's requests, response bytes and, for a
// watch, the events the backend streamed.
func TestTrafficProxy(t *testing.T) {
	backend := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			for range 3 {
				io.WriteString(w, `{"type":"ADDED","object":{}}`+"\n")
				w.(http.Flusher).Flush()
			}
			return
		}
		io.WriteString(w, `{"kind":"Pod"}`)
	}))
	defer backend.Close()
	p, err := newTrafficProxy(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test server
	for _, u := range []string{"/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn", "/api/v1/namespaces/a/pods/b", "/api/v1/namespaces/a/pods/b"} {
		resp, err := client.Get(p.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := p.take()
	want := map[string]traffic{"WATCH pods spec.nodeName=n": {Requests: 1, Bytes: 3 * 29, Events: 3}, "GET pods": {Requests: 2, Bytes: 2 * 14}}
	if len(got) != len(want) || got["GET pods"] != want["GET pods"] || got["WATCH pods spec.nodeName=n"] != want["WATCH pods spec.nodeName=n"] {
		t.Errorf("counted %+v, want %+v", got, want)
	}
	if again := p.take(); len(again) != 0 {
		t.Errorf("after take: %+v, want nothing", again)
	}
}

func TestFallbackPath(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{`{"cniVersion":"1.0.0","interfaces":[]}`, pathAgent},
		{"devplumb: devplumb agent unavailable: nobody listening on /tmp/b/run/agent.sock (a dead agent's socket): connection refused; doing the call with devplumb-direct\n{}", pathConnect},
		{"devplumb: devplumb agent unavailable: hello: EOF; doing the call with devplumb-direct\n", pathConnect},
		{"x\ndevplumb: devplumb agent unavailable: agent on /s closed the connection without a prepare answer; doing the call with devplumb-direct\n", pathPrepare},
		{"devplumb: devplumb agent unavailable: commit to /s: write: broken pipe; doing the call with devplumb-direct\n", pathCommit},
	} {
		if got := fallbackPath([]byte(c.out)); got != c.want {
			t.Errorf("%q: %q, want %q", c.out, got, c.want)
		}
	}
	got := describePaths(map[string]int{pathCommit: 2, pathAgent: 1, pathPrepare: 17})
	if want := "through the agent 1, fell back at prepare 17, fell back at commit, its delegates run 2"; got != want {
		t.Errorf("describePaths = %q, want %q", got, want)
	}
}

func TestMetricValues(t *testing.T) {
	text := `# HELP devplumb_agent_cached_objects Objects the node agent's watches hold.
# TYPE devplumb_agent_cached_objects gauge
devplumb_agent_cached_objects{kind="pod"} 110
devplumb_agent_cached_objects{kind="resourceslice"} 1
devplumb_agent_cached_objects_other{kind="pod"} 7
devplumb_agent_cache_lookups_total{kind="pod",result="hit"} 12
devplumb_up 1
`
	got, err := metricValues(text, "devplumb_agent_cached_objects", "kind")
	if err != nil || len(got) != 2 || got["pod"] != 110 || got["resourceslice"] != 1 {
		t.Errorf("cached objects: %v, %v", got, err)
	}
	got, err = metricValues(text, "devplumb_agent_cache_lookups_total", "kind")
	if err != nil || got[`{kind="pod",result="hit"}`] != 12 {
		t.Errorf("a sample with two labels is kept by its label set: %v, %v", got, err)
	}
	if got, err := metricValues(text, "devplumb_up", "kind"); err != nil || got[""] != 1 {
		t.Errorf("no labels: %v, %v", got, err)
	}
	if _, err := metricValues("devplumb_up one\n", "devplumb_up", ""); err == nil || !strings.Contains(err.Error(), "devplumb_up one") {
		t.Errorf("a bad value: %v, want an error quoting the line", err)
	}
	if got := describeCounts(map[string]float64{"resourceslice": 1, "pod": 110}); got != "pod 110, resourceslice 1" {
		t.Errorf("describeCounts = %q", got)
	}
	if got := describeCounts(nil); got != "none" {
		t.Errorf("describeCounts of nothing = %q", got)
	}
}

func TestDescribeLookups(t *testing.T) {
	before := map[string]float64{`{kind="pod",result="hit"}`: 2}
	after := map[string]float64{`{kind="pod",result="hit"}`: 152, `{kind="pod",result="miss"}`: 70, `{kind="resourceclaim",result="hit"}`: 0}
	if got, want := describeLookups(before, after), "pod hit 150, pod miss 70"; got != want {
		t.Errorf("describeLookups = %q, want %q", got, want)
	}
	if got := describeLookups(after, after); got != "none" {
		t.Errorf("no lookups between: %q", got)
	}
}
