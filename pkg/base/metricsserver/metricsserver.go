// Package metricsserver serves a daemon's /metrics and probes over HTTP.
package metricsserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Start listens at once, so a taken port fails the daemon's start rather than a probe
// later, and serves h until the returned stop is called. flag names the option that
// gave addr, for the error.
func Start(flag, addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics and probes", "address", l.Addr().String())
	return func() { _ = srv.Close() }, nil
}
