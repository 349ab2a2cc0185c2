package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// serveMetrics serves the collectors on /metrics at the root-only unix
// socket until ctx ends; a server that fails ends the agent (stop). The
// function returned waits for it and says why it stopped.
func serveMetrics(ctx context.Context, stop func(), socket string, cs ...prometheus.Collector) (func() error, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
	l, err := agentproto.Listen(socket)
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
