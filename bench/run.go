package bench

import (
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// Config says which binaries to measure and how much.
type Config struct {
	Devplumb string // the devplumb binary (the CNI entry point, devplumb-direct beside it)
	// Agent is the node agent (devplumb-agent); "" skips the agent's rows.
	Agent  string
	CNIBin string // bridge, host-local and cnitool
	// Passthrough is bench/passthrough, P1's reference meta-plugin; "" skips its row.
	Passthrough string
	Multus      string // Multus thin; "" skips it (and says so)
	// MultusThick is a directory with multus-shim and multus-daemon; "" skips Multus
	// thick (and says so). It needs Kube.
	MultusThick string
	// Baseline, when set, is another devplumb binary (an earlier build) run next to it.
	Baseline string
	Runs     int // ADD+DEL cycles per P1 variant and samples per P4/P5 figure
	// Pairs is how many more rounds P1 runs of the pass-through and the rows through the
	// agent alone, for their paired differences (issue 38's targets); 0: none.
	Pairs int
	Pods  int       // P3: pods added at once
	Soak  int       // ADD/DEL cycles of the soak; 0 skips it
	Only  []string  // the steps to run (their names' first word: P1 ... P10, Soak); empty: all
	Log   io.Writer // progress
	// Kube runs devplumb also with a kubeconfig against a real kube-apiserver (P1, P5, P6),
	// found as the e2e tests find it (DEVPLUMB_KUBE_APISERVER, DEVPLUMB_ETCD).
	Kube bool

	kube *kubeNode
}

func (c Config) plugin(name string) string { return filepath.Join(c.CNIBin, name) }

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, format+"\n", args...)
	}
}

// Run measures P1-P6 and returns the report. It needs root.
func Run(cfg Config) (*Report, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the bench needs root (network namespaces, bridge)")
	}
	if _, err := os.Stat(gnuTime); err != nil {
		return nil, fmt.Errorf("the bench measures peak RSS with GNU time (Debian package time): %w", err)
	}
	cfg.Runs = max(cfg.Runs, 5)
	cfg.Pods = max(cfg.Pods, 1)
	defer removeIfCreated(testenv.CnitoolResults, filepath.Dir(testenv.CnitoolResults))()
	if cfg.Kube {
		cfg.logf("== starting etcd and kube-apiserver")
		k, err := startKube()
		if err != nil {
			return nil, err
		}
		setLiveKube(k)
		defer setLiveKube(nil)
		defer k.close()
		cfg.kube = k
	}
	r := &Report{Title: "devplumb bench", Intro: intro(cfg)}
	steps := []struct {
		name string
		run  func(Config, *Report) error
	}{{"P1 ADD+DEL cycle", p1}, {"P2 device lookup", p2}, {"P3 burst", p3}, {"P4 start-up", p4}, {"P5 phases", p5}, {"P6 DRA device", p6}, {"P8 agent burst", p8}, {"P9 fallback", p9}, {"P7 cluster", p7}, {"P10 cost", p10}, {"Soak", soak}}
	runStart := time.Now()
	var took []string
	for _, s := range steps {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, strings.Fields(s.name)[0]) {
			continue
		}
		start := time.Now()
		cfg.logf("== %s", s.name)
		if err := s.run(cfg, r); err != nil {
			return r, fmt.Errorf("%s: %w", s.name, err)
		}
		d := time.Since(start).Round(time.Second)
		cfg.logf("   done in %s", d)
		took = append(took, strings.Fields(s.name)[0]+" "+d.String())
	}
	r.Intro = append(r.Intro, fmt.Sprintf("The run took %s (%s); load average at its end %s.",
		time.Since(runStart).Round(time.Second), strings.Join(took, ", "), loadAverage()))
	return r, nil
}

// loadAverage is the 1, 5 and 15 minute load averages, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// removeIfCreated returns a func that removes dirs (each only if empty) when they did not
// exist when it was made: cnitool keeps its result cache in /var/lib/cni/results.
func removeIfCreated(dirs ...string) func() {
	var missing []string
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			missing = append(missing, d)
		}
	}
	return func() {
		for _, d := range missing {
			_ = os.Remove(d) // fails, as it should, when something is left inside
		}
	}
}

func intro(cfg Config) []string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	load := loadAverage()
	return []string{
		fmt.Sprintf("Run %s on %d CPUs (%s), load average at start %s, %s, %d samples per figure.",
			time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), cpu, load, runtime.Version(), cfg.Runs),
		"Each figure is the median, with the 25th-75th percentile in brackets.",
		peers(cfg),
	}
}

// peers names the release of each peer binary measured, read from its Go build info (the
// build scripts build them from the module proxy at the pinned version), so a results file
// says which Multus and kube-apiserver its ratios are to.
func peers(cfg Config) string {
	bins := []struct{ name, path string }{
		{"Multus thin", cfg.Multus},
		{"Multus thick", filepath.Join(cfg.MultusThick, "multus-daemon")},
		{"kube-apiserver", os.Getenv("DEVPLUMB_KUBE_APISERVER")},
	}
	var named []string
	for _, b := range bins {
		if b.path == "" || b.path == "multus-daemon" {
			continue
		}
		v := "unknown version"
		if info, err := buildinfo.ReadFile(b.path); err == nil {
			v = info.Main.Version
		}
		named = append(named, b.name+" "+v)
	}
	if len(named) == 0 {
		return "Peers: none."
	}
	return "Peers: " + strings.Join(named, ", ") + "."
}

// WriteResults writes results.md and chart.png into dir.
func WriteResults(r *Report, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "chart.png"))
	if err != nil {
		return err
	}
	if err := WriteChart(f, r.Panels); err != nil {
		f.Close()
		return fmt.Errorf("chart: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	var b strings.Builder
	r.WriteMarkdown(&b, "chart.png")
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(b.String()), 0o644)
}
