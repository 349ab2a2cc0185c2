package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/base/metricsauth"
)

// With --state-dir "" (the DaemonSet's non-root metrics container: the node agent keeps
// the phase spool) the daemon serves /metrics without a spool of its own and touches no
// state directory.
func TestMetricsWithoutStateDir(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveMetrics(ctx, addr, "", time.Hour, "", metricsauth.Options{}, slog.New(slog.DiscardHandler))
	}()
	body := getMetrics(t, "http://"+addr+"/metrics", done)
	if !strings.Contains(body, "go_goroutines") || strings.Contains(body, "devplumb_phase_spool_unreadable_total") {
		t.Errorf("/metrics without a state directory:\n%.500s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serveMetrics: %v", err)
	}
	if _, err := os.Stat("phases"); !os.IsNotExist(err) {
		t.Errorf("a spool was made in the working directory: %v", err)
	}
}

// getMetrics GETs url until the server started in the background answers.
func getMetrics(t *testing.T, url string, done <-chan error) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("serveMetrics ended: %v", err)
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
}
