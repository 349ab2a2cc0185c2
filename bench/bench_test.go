package bench

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/testenv"
)

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{5, 1, 4, 2, 3})
	if s.N != 5 || s.Median != 3 || s.P25 != 2 || s.P75 != 4 || s.Min != 1 || s.Max != 5 {
		t.Fatalf("%+v", s)
	}
	if s := Summarize([]float64{1, 2}); s.Median != 1.5 {
		t.Errorf("median of two: %v", s.Median)
	}
	if got := Summarize(nil).Format("ms"); got != "-" {
		t.Errorf("empty: %q", got)
	}
	if got := (Summary{N: 3, Median: 12.345, P25: 9.5, P75: 150}).Format("ms"); got != "12.3 (9.50-150) ms" {
		t.Errorf("format: %q", got)
	}
}

func TestParseInitTrace(t *testing.T) {
	trace := "init internal/bytealg @0.008 ms, 0 ms clock, 0 bytes, 0 allocs\n" +
		"init k8s.io/client-go/kubernetes/scheme @43 ms, 4.8 ms clock, 649336 bytes, 5291 allocs\n" +
		"something else\n"
	n, total := parseInitTrace([]byte(trace))
	if n != 2 || total != 4.8 {
		t.Fatalf("n=%d total=%v", n, total)
	}
}

func TestParsePhases(t *testing.T) {
	log := "time=2026-01-01T00:00:00Z level=DEBUG msg=\"other thing\" a=b\n" +
		"time=2026-01-01T00:00:00Z level=DEBUG msg=phases op=ADD config=85µs podResources=1.5ms delegate=12ms\n"
	ph, err := parsePhases([]byte(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []phase{{"config", 85 * time.Microsecond}, {"podResources", 1500 * time.Microsecond}, {"delegate", 12 * time.Millisecond}}
	if len(ph) != len(want) {
		t.Fatalf("%v", ph)
	}
	for i := range want {
		if ph[i] != want[i] {
			t.Errorf("phase %d: %v, want %v", i, ph[i], want[i])
		}
	}
	if _, err := parsePhases([]byte("no such line")); err == nil {
		t.Error("a log without phases was accepted")
	}
	o := newOpPhases()
	if err := o.add(proc{wall: 20 * time.Millisecond, stderr: []byte(log)}); err != nil {
		t.Fatal(err)
	}
	if d := o.ms[outside][0] - 6.415; o.order[0] != outside || d > 1e-9 || d < -1e-9 {
		t.Errorf("outside the phases: %v %v", o.order, o.ms[outside])
	}
}

// A chart label that does not fit its column is cut with "...", so it does not run
// under the bars; one that fits is drawn whole.
func TestChartLabelsFit(t *testing.T) {
	long := strings.Repeat("x", 2*labelChars)
	if got := fitLabel(long); len(got) != labelChars || !strings.HasSuffix(got, "...") {
		t.Errorf("a %d-character label drawn as %d characters %q, want %d ending in ...", len(long), len(got), got, labelChars)
	}
	if short := strings.Repeat("é", labelChars); fitLabel(short) != short {
		t.Errorf("a label of %d characters that fits was cut: %q", labelChars, fitLabel(short))
	}
}

func TestReportOutputs(t *testing.T) {
	r := &Report{Title: "t", Intro: []string{"intro"},
		Tables: []Table{{Title: "P1", Header: []string{"what", "ms"}, Rows: [][]string{{"a|b", "1"}}, Notes: []string{"note"}}},
		Panels: []Panel{{Title: "P1", Unit: "ms", Bars: []Bar{{"a", Summarize([]float64{1, 2, 3})}, {"b", Summarize([]float64{4, 5, 9})}}}}}
	var md, txt bytes.Buffer
	r.WriteMarkdown(&md, "chart.png")
	for _, want := range []string{"# t\n", "![chart](chart.png)", "| what | ms |", "| a\\|b | 1 |", "- note"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	r.WriteText(&txt)
	if !strings.Contains(txt.String(), "  a|b   1\n") || !strings.Contains(txt.String(), "* note") {
		t.Errorf("text:\n%s", txt.String())
	}
	dir := t.TempDir()
	if err := WriteResults(r, dir); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "chart.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != chartWidth || b.Dy() < 2*rowHeight {
		t.Errorf("chart size %v", b)
	}
}

// The pods the PodResources server answers with, their device-info files, and the
// claim check P3 reports.
func TestPodSetAndClaimCheck(t *testing.T) {
	store := devinfo.NewStore(t.TempDir())
	s := newPodSet(store)
	if err := s.set(300, 2); err != nil {
		t.Fatal(err)
	}
	p, ok := s.GetPod(podNS, "pod-299")
	if !ok || p.Containers[0].Devices[0].DeviceIds[1] != "dev-299-1" || len(s.ListPods()) != 300 {
		t.Fatalf("pod-299: %v %v", p, ok)
	}
	if _, err := store.ReadDP(Resource, "dev-299-1"); err != nil {
		t.Errorf("device-info of dev-299-1: %v", err)
	}
	state := t.TempDir()
	dir := filepath.Join(state, "attachments")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	recs := map[string]string{
		"a": `{"deviceID":"dev-1-0","pod":{"name":"pod-1"}}`,
		"b": `{"deviceID":"dev-1-0","pod":{"name":"pod-1"}}`, // claimed twice
		"c": `{"deviceID":"dev-2-1","pod":{"name":"pod-3"}}`, // not the pod's
	}
	for n, rec := range recs {
		if err := os.WriteFile(filepath.Join(dir, n+".json"), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	double, wrong, err := checkClaims(state)
	if err != nil || double != 1 || wrong != 1 {
		t.Fatalf("double=%d wrong=%d err=%v", double, wrong, err)
	}
}

// P6 counts what it claims: with the node set up as a DRA driver, the scheduler and the
// kubelet would, the local path asks the API server nothing to find the device (its
// requests are network-status's and the claim status's), the API path reads the pod,
// the claim and the driver's slices on the node once each, and every DRA ADD and DEL
// writes the claim's status once (runP6 also checks the entry after the first ADD and
// DEL). It needs what the e2e tests need (root, kube-apiserver, etcd, the CNI plugins):
// make test sets DEVPLUMB_KUBE_APISERVER; make unit does not, and skips it.
func TestP6CountsRequestsPerPath(t *testing.T) {
	k := testKube(t)
	cfg := Config{Devplumb: filepath.Join(testenv.Build(t, "./cmd/devplumb"), "devplumb"), CNIBin: testenv.CNIPlugins(t),
		Runs: 1, kube: k}
	vs, err := runP6(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The API path's network-status starts from its pod read: no read of its own.
	want := map[string]struct{ deviceReads, claimWrites, addTotal int }{
		"device plugin": {0, 0, 2}, "DRA local": {0, 1, 3}, "DRA API, network-only claim": {3, 1, 5}, "DRA API, resourceClaim": {3, 1, 5},
		"DRA ext. resource local": {0, 1, 3}, "DRA ext. resource API": {3, 1, 5}}
	for _, v := range vs {
		w, ok := want[v.short]
		if !ok || len(v.addReq) != 1 || len(v.delReq) != 1 {
			t.Fatalf("variant %q: %d ADD and %d DEL samples", v.short, len(v.addReq), len(v.delReq))
		}
		add, del := v.addReq[0], v.delReq[0]
		reads := 0
		for _, k := range deviceReads {
			reads += add[k] + del[k]
		}
		if reads != w.deviceReads || kubeapi.Requests(add) != w.addTotal || add["PATCH resourceclaims/status"] != w.claimWrites ||
			del["PATCH resourceclaims/status"] != w.claimWrites || add["PATCH pods (metadata)"] != 1 || del["PATCH pods (metadata)"] != 1 {
			t.Errorf("%s: ADD %s; DEL %s: want %d device reads, %d requests per ADD, %d claim status writes per call, "+
				"one network-status patch", v.short, kubeapi.DescribeCounts(add), kubeapi.DescribeCounts(del), w.deviceReads,
				w.addTotal, w.claimWrites)
		}
		t.Logf("%s: ADD %s; DEL %s", v.short, describeRequests(v.addReq), describeRequests(v.delReq))
	}
}

// testKube is the bench's API server for a test, stopped when it ends; the test is
// skipped without a kube-apiserver ($DEVPLUMB_KUBE_APISERVER: make test and make e2e
// set it, make unit does not).
func testKube(t *testing.T) *kubeNode {
	t.Helper()
	if os.Getenv(kubeapi.EnvKubeAPIServer) == "" {
		t.Skipf("needs a kube-apiserver: $%s not set (make test and make e2e set it)", kubeapi.EnvKubeAPIServer)
	}
	k, err := startKube()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.close)
	return k
}
