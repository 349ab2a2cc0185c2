package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// gnuTime is GNU time, which forks its child: Go starts children with vfork, so the
// peak RSS wait4 reports for them includes the parent's (this bench's) memory.
const gnuTime = "/usr/bin/time"

// peakRSS runs the plugin under GNU time and returns its peak RSS in MiB: the largest of
// the process and the children it waited for (the plugins it delegated to).
func peakRSS(bin string, env []string, stdin []byte) (float64, error) {
	out, err := os.CreateTemp("", "devplumb-bench-rss-")
	if err != nil {
		return 0, err
	}
	out.Close()
	defer os.Remove(out.Name())
	if _, err := run(exec.Command(gnuTime, "-f", "%M", "-o", out.Name(), bin), env, stdin); err != nil {
		return 0, err
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		return 0, err
	}
	kib, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		return 0, fmt.Errorf("%s output %q: %w", gnuTime, b, err)
	}
	return kib / 1024, nil
}

// rssRuns is how often a peak RSS is measured: it varies little.
const rssRuns = 5

// p4 measures one invocation: binary size, package initialisers, VERSION (start-up),
// and the peak RSS of an ADD, for the entry point devplumb, devplumb-direct (what it execs
// without an agent) and the bridge plugin it delegates to; start-up and memory also as a
// ratio to bridge's, measured in the same step.
func p4(cfg Config, r *Report) error {
	e, err := newEnvWithPods(cfg, podresourcesserver.Config{NoRateLimit: true}, 1, 1)
	if err != nil {
		return err
	}
	defer e.close()
	bins := []p4Bin{{"bridge", cfg.plugin("bridge"), false}, {"devplumb (entry point)", cfg.Devplumb, false},
		{"devplumb-direct", directBeside(cfg.Devplumb), false}, {"devplumb baseline", cfg.Baseline, false},
		{"Go pass-through (libcni)", cfg.Passthrough, true}, {"Multus thin", cfg.Multus, true}}
	t := Table{Title: "P4: one invocation",
		Header: []string{"binary", "size", "package inits", "init time (inittrace)", "VERSION wall", "VERSION ÷ bridge's", "VERSION peak RSS", "− bridge's", "ADD peak RSS"}}
	startup := Panel{Title: "P4: start-up (CNI VERSION, process wall time)", Unit: "ms"}
	var bridge *p4Row
	for _, b := range bins {
		if b.path == "" {
			continue
		}
		row, err := measureP4(e, b)
		if err != nil {
			return err
		}
		if bridge == nil {
			bridge = row
		}
		t.Rows = append(t.Rows, row.cells(bridge))
		startup.Bars = append(startup.Bars, Bar{Label: b.label, S: row.version})
	}
	t.Notes = []string{"Targets: the entry point's start-up at most 1.2 × bridge's and its VERSION peak RSS at most bridge's + 2 MiB (issue 24); devplumb-direct's start-up at most 2 × bridge's, peak RSS of one ADD at most 20 MiB (issue 16).",
		"Peak RSS is the child's maxrss from wait4 (getrusage) as GNU time reports it (GNU time forks; the bench's Go runtime starts children with vfork, whose maxrss would include the bench's own memory); for ADD the largest of the plugin and the plugins it ran (bridge, host-local). The ratios take the medians. The entry point answers VERSION itself; its ADD here finds no agent and execs devplumb-direct (one process: maxrss spans the exec), which looks the device up in PodResources.",
		"The Go pass-through (bench/passthrough, P1's reference meta-plugin) links the CNI library and nothing of devplumb's: its start-up is what any CNI plugin in Go that runs its delegates with libcni pays on this machine.",
		"init time sums the clock time GODEBUG=inittrace=1 reports per package; under load it includes time the process was not running."}
	r.Tables = append(r.Tables, t)
	r.Panels = append(r.Panels, startup)
	return nil
}

// p4Bin is one binary P4 measures; versionOnly: no ADD (its config is not
// devplumb's or bridge's).
type p4Bin struct {
	label, path string
	versionOnly bool
}

// directBeside is devplumb-direct beside the entry point, where the entry point finds it.
func directBeside(entry string) string { return filepath.Join(filepath.Dir(entry), "devplumb-direct") }

// p4Row is one binary's figures.
type p4Row struct {
	label, size, inits, initMs, addRSS string
	version, rss                       Summary
}

// cells is the row as a table's, start-up and memory also relative to bridge's.
func (r *p4Row) cells(bridge *p4Row) []string {
	return []string{r.label, r.size, r.inits, r.initMs, r.version.Format("ms"),
		fmt.Sprintf("%.2f", r.version.Median/bridge.version.Median), r.rss.Format("MiB"),
		fmt.Sprintf("%+.2f MiB", r.rss.Median-bridge.rss.Median), r.addRSS}
}

func measureP4(e *env, b p4Bin) (*p4Row, error) {
	label, bin := b.label, b.path
	st, err := os.Stat(bin)
	if err != nil {
		return nil, err
	}
	inits, initMs, err := initTrace(bin, e.cfg.Runs)
	if err != nil {
		return nil, err
	}
	var wall, rss []float64
	env := append(os.Environ(), "CNI_COMMAND=VERSION")
	for range e.cfg.Runs {
		p, err := runPlugin(bin, env, nil)
		if err != nil {
			return nil, err
		}
		wall = append(wall, Ms(p.wall))
	}
	for range rssRuns {
		mib, err := peakRSS(bin, env, nil)
		if err != nil {
			return nil, err
		}
		rss = append(rss, mib)
	}
	addRSS := "–"
	if !b.versionOnly {
		s, err := addPeakRSS(e, label, bin)
		if err != nil {
			return nil, err
		}
		addRSS = s.Format("MiB")
	}
	return &p4Row{label: label, size: fmt.Sprintf("%.1f MiB", float64(st.Size())/(1<<20)), inits: fmt.Sprint(inits),
		initMs: initMs.Format("ms"), addRSS: addRSS, version: Summarize(wall), rss: Summarize(rss)}, nil
}

// initTrace runs VERSION with GODEBUG=inittrace=1 and sums the initialisers' clock time.
func initTrace(bin string, runs int) (int, Summary, error) {
	var ms []float64
	inits := 0
	for range runs {
		p, err := runPlugin(bin, append(os.Environ(), "CNI_COMMAND=VERSION", "GODEBUG=inittrace=1"), nil)
		if err != nil {
			return 0, Summary{}, err
		}
		n, total := parseInitTrace(p.stderr)
		inits, ms = n, append(ms, total)
	}
	return inits, Summarize(ms), nil
}

// parseInitTrace reads "init pkg @0.1 ms, 0.05 ms clock, ..." lines: their number and
// the sum of their clock milliseconds.
func parseInitTrace(b []byte) (int, float64) {
	n, total := 0, 0.0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 7 || f[0] != "init" || f[5] != "ms" || f[6] != "clock," {
			continue
		}
		v, err := strconv.ParseFloat(f[4], 64)
		if err == nil {
			n, total = n+1, total+v
		}
	}
	return n, total
}

// addPeakRSS runs ADD then DEL directly (no cnitool) and returns the ADDs' peak RSS.
func addPeakRSS(e *env, label, bin string) (Summary, error) {
	conf := e.bridge("10.125.0.0/24")
	conf["cniVersion"], conf["name"] = "1.0.0", "rss-bridge"
	if label != "bridge" {
		conf = e.devplumbConf("rss", "10.125.1.0/24", filepath.Join(e.dir, "state"))
	}
	stdin, nodeEnv, err := e.directStdin(conf)
	if err != nil {
		return Summary{}, err
	}
	netns, err := e.newNetns()
	if err != nil {
		return Summary{}, err
	}
	var rss []float64
	for i := range rssRuns {
		mib, err := peakRSS(bin, append(e.cniEnv("ADD", netns, fmt.Sprintf("rss%d", i), false), nodeEnv), stdin)
		if err != nil {
			return Summary{}, err
		}
		rss = append(rss, mib)
		if _, err := runPlugin(bin, append(e.cniEnv("DEL", netns, fmt.Sprintf("rss%d", i), false), nodeEnv), stdin); err != nil {
			return Summary{}, err
		}
	}
	return Summarize(rss), nil
}
