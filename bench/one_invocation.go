package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
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
// and the peak RSS of an ADD, for devplumb and for the bridge plugin it delegates to.
func p4(cfg Config, r *Report) error {
	e, err := newEnvWithPods(cfg, podresourcesserver.Config{NoRateLimit: true}, 1, 1)
	if err != nil {
		return err
	}
	defer e.close()
	bins := []struct{ label, path string }{{"devplumb", cfg.Devplumb}, {"devplumb baseline", cfg.Baseline},
		{"bridge", cfg.plugin("bridge")}, {"Multus thin", cfg.Multus}}
	t := Table{Title: "P4: one invocation",
		Header: []string{"binary", "size", "package inits", "init time (inittrace)", "VERSION wall", "VERSION peak RSS", "ADD peak RSS"}}
	startup := Panel{Title: "P4: start-up (CNI VERSION, process wall time)", Unit: "ms"}
	for _, b := range bins {
		if b.path == "" {
			continue
		}
		row, version, err := p4Row(e, b.label, b.path)
		if err != nil {
			return err
		}
		t.Rows = append(t.Rows, row)
		startup.Bars = append(startup.Bars, Bar{Label: b.label, S: version})
	}
	t.Notes = []string{"Targets: devplumb's start-up at most 2 × bridge's; peak RSS of one ADD at most 20 MiB.",
		"Peak RSS as GNU time reports it; for ADD the largest of the plugin and the plugins it ran (bridge, host-local). devplumb's ADD includes its PodResources lookup.",
		"init time sums the clock time GODEBUG=inittrace=1 reports per package; under load it includes time the process was not running."}
	r.Tables = append(r.Tables, t)
	r.Panels = append(r.Panels, startup)
	return nil
}

func p4Row(e *env, label, bin string) ([]string, Summary, error) {
	st, err := os.Stat(bin)
	if err != nil {
		return nil, Summary{}, err
	}
	inits, initMs, err := initTrace(bin, e.cfg.Runs)
	if err != nil {
		return nil, Summary{}, err
	}
	var wall, rss []float64
	env := append(os.Environ(), "CNI_COMMAND=VERSION")
	for range e.cfg.Runs {
		p, err := runPlugin(bin, env, nil)
		if err != nil {
			return nil, Summary{}, err
		}
		wall = append(wall, Ms(p.wall))
	}
	for range rssRuns {
		mib, err := peakRSS(bin, env, nil)
		if err != nil {
			return nil, Summary{}, err
		}
		rss = append(rss, mib)
	}
	addRSS := "–"
	if label != "Multus thin" {
		s, err := addPeakRSS(e, label, bin)
		if err != nil {
			return nil, Summary{}, err
		}
		addRSS = s.Format("MiB")
	}
	version := Summarize(wall)
	return []string{label, fmt.Sprintf("%.1f MiB", float64(st.Size())/(1<<20)), fmt.Sprint(inits), initMs.Format("ms"),
		version.Format("ms"), Summarize(rss).Format("MiB"), addRSS}, version, nil
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
	stdin, err := json.Marshal(conf)
	if err != nil {
		return Summary{}, err
	}
	netns, err := e.newNetns()
	if err != nil {
		return Summary{}, err
	}
	var rss []float64
	for i := range rssRuns {
		mib, err := peakRSS(bin, e.cniEnv("ADD", netns, fmt.Sprintf("rss%d", i), false), stdin)
		if err != nil {
			return Summary{}, err
		}
		rss = append(rss, mib)
		if _, err := runPlugin(bin, e.cniEnv("DEL", netns, fmt.Sprintf("rss%d", i), false), stdin); err != nil {
			return Summary{}, err
		}
	}
	return Summarize(rss), nil
}
