package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/devplumb/devplumb/pkg/cni/phasemetrics"
)

// serveMetrics serves the collectors on /metrics at the unix socket (root's,
// or also acc's peer) until ctx ends; a server that fails ends the agent
// (stop). The function returned waits for it and says why it stopped.
func serveMetrics(ctx context.Context, stop func(), socket string, acc metricsAccess, log *slog.Logger,
	cs ...prometheus.Collector) (func() error, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
	l, err := listenMetrics(socket, acc, log)
	if err != nil {
		return nil, fmt.Errorf("metrics socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() {
		err := srv.Serve(l)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
		stop()
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // closes l, which removes the socket file
	}()
	return func() error { return <-done }, nil
}

// phaseHistograms are the histograms of the agent's own calls (path "agent")
// and, with a state directory, of devplumb-direct's calls, drained from that
// directory's phase spool (path "direct"): the agent, root, reads the
// root-only spool, so the metrics container needs no access to devplumb's
// state. The spool is drained every interval (so it stays small between
// scrapes) until ctx ends; close removes it, and devplumb-direct stops
// writing records.
func phaseHistograms(ctx context.Context, stateDir string, every time.Duration, log *slog.Logger) (*phasemetrics.Collector, error) {
	if stateDir == "" {
		return phasemetrics.NewHistograms(log), nil
	}
	c, err := phasemetrics.NewCollector(stateDir, log)
	if err != nil {
		return nil, err
	}
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := c.Drain(); err != nil {
					log.Warn("drain phase spool", "err", err)
				}
			}
		}
	}()
	return c, nil
}
