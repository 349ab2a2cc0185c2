// Package metricsserver serves a daemon's /metrics and probes over HTTP or HTTPS.
package metricsserver

import (
	"crypto/tls"
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
	return StartTLS(flag, addr, h, nil, log)
}

// StartTLS is Start serving HTTPS with cfg (plain HTTP when cfg is nil).
func StartTLS(flag, addr string, h http.Handler, cfg *tls.Config, log *slog.Logger) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	scheme := "http"
	if cfg != nil {
		l, scheme = tls.NewListener(l, cfg), "https"
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics and probes", "address", l.Addr().String(), "scheme", scheme)
	return func() { _ = srv.Close() }, nil
}
