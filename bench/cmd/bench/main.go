// Command bench runs devplumb's benchmark (make bench): P1-P5 of issue 16 and P6 of
// issue 12, printed as a table and written as markdown and a chart. It needs root.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/devplumb/devplumb/bench"
)

func main() {
	bench.ServeIdleAgentIfAsked() // P1's idle agent: this binary, started again
	cfg := bench.Config{Log: os.Stderr}
	out := flag.String("out", "bench/results", "directory for results.md and chart.png")
	flag.StringVar(&cfg.Devplumb, "devplumb", "bin/devplumb", "the devplumb binary")
	flag.StringVar(&cfg.Agent, "agent", "bin/devplumb-agent", "the node agent (empty: the agent's rows not run)")
	flag.StringVar(&cfg.CNIBin, "cni-bin", "bin/cni", "directory with bridge, host-local and cnitool")
	flag.StringVar(&cfg.Passthrough, "passthrough", "bin/bench-passthrough", "P1's reference meta-plugin, bench/passthrough (empty: its row not run)")
	flag.StringVar(&cfg.Multus, "multus", os.Getenv("DEVPLUMB_MULTUS"), "Multus thin binary (empty: not run)")
	flag.StringVar(&cfg.MultusThick, "multus-thick", os.Getenv("DEVPLUMB_MULTUS_THICK"), "directory with Multus thick's multus-shim and multus-daemon (empty: not run; needs -kube)")
	flag.BoolVar(&cfg.Kube, "kube", false, "also run devplumb with a kubeconfig against a real kube-apiserver (DEVPLUMB_KUBE_APISERVER, DEVPLUMB_ETCD)")
	flag.StringVar(&cfg.Baseline, "baseline", "", "an earlier devplumb build to run side by side (optional)")
	flag.IntVar(&cfg.Runs, "runs", 30, "samples per figure")
	flag.IntVar(&cfg.Pairs, "pairs", 360, "P1: more rounds of the pass-through and the rows through the agent alone, paired (0: none)")
	flag.IntVar(&cfg.Pods, "pods", 64, "P3: pods added at once")
	flag.IntVar(&cfg.Soak, "soak", 1000, "soak: ADD/DEL cycles against nodesim, netdev-dp and devplumbctl metrics (0: skip)")
	only := flag.String("only", "", "run only these steps, comma-separated: P1,P2,P3,P4,P5,P6,P7,P8,P9,P10,Soak (empty: all)")
	flag.Parse()
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench: %s: cleaning up\n", s)
		bench.Abort()
		os.Exit(130)
	}()
	r, err := bench.Run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	r.WriteText(os.Stdout)
	if err := bench.WriteResults(r, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench: write results:", err)
		os.Exit(1)
	}
	fmt.Printf("\nwritten: %s/results.md, %s/chart.png\n", *out, *out)
}
