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

	"golang.org/x/net/netutil"
)

// limits bound what one client can hold of a metrics server, which listens on the node's
// network: a scraper or a probe sends one small request and reads one answer, so a
// connection that is slower than these, or a crowd of them, is not one and must not keep
// the daemon's memory, file descriptors or goroutines.
type limits struct {
	readHeader, read, write, idle time.Duration
	// conns is the most connections served at once; those past it wait in the
	// kernel's accept queue until one closes.
	conns int
}

// defaultLimits: the write bound covers a scrape that asks the API server who the scraper
// is (--secure-metrics) and the node agent for its series (5 s each at most).
var defaultLimits = limits{readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second,
	idle: 60 * time.Second, conns: 16}

// Start listens at once, so a taken port fails the daemon's start rather than a probe
// later, and serves h until the returned stop is called. flag names the option that
// gave addr, for the error.
func Start(flag, addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	return StartTLS(flag, addr, h, nil, log)
}

// StartTLS is Start serving HTTPS with cfg (plain HTTP when cfg is nil).
func StartTLS(flag, addr string, h http.Handler, cfg *tls.Config, log *slog.Logger) (stop func(), err error) {
	_, stop, err = start(flag, addr, h, cfg, defaultLimits, log)
	return stop, err
}

// start is StartTLS with lim; it also returns the address it listens on.
func start(flag, addr string, h http.Handler, cfg *tls.Config, lim limits, log *slog.Logger) (net.Addr, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	// The cap counts TCP connections, before any TLS handshake: a handshake that
	// never finishes holds its slot only until net/http's handshake timeout (the
	// shortest of the bounds).
	l = netutil.LimitListener(l, lim.conns)
	scheme := "http"
	if cfg != nil {
		l, scheme = tls.NewListener(l, cfg), "https"
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read,
		WriteTimeout: lim.write, IdleTimeout: lim.idle}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics and probes", "address", l.Addr().String(), "scheme", scheme,
		"maxConnections", lim.conns)
	return l.Addr(), func() { _ = srv.Close() }, nil
}
