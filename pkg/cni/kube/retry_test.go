package kube

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
)

// countingListener counts the connections a server accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestWrongCertificateFailsAtOnce: a kubeconfig whose server name the certificate does
// not cover is a configuration error, reported as such after one attempt, not retried
// for the whole bound and then called unreachable.
func TestWrongCertificateFailsAtOnce(t *testing.T) {
	var conns atomic.Int32
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("request got through TLS verification")
	}))
	hs.Listener = countingListener{hs.Listener, &conns}
	hs.StartTLS()
	defer hs.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw})
	// The test certificate is for 127.0.0.1, ::1 and example.com, not localhost.
	_, port, _ := net.SplitHostPort(hs.Listener.Addr().String())
	dir := t.TempDir()
	caPath := filepath.Join(dir, "ca.crt")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://localhost:%s\", certificate-authority: %q}\n"+
		"users:\n- name: u\n  user: {token: x}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n", port, caPath)
	must(t, os.WriteFile(caPath, ca, 0o600))
	cfg := filepath.Join(dir, "kubeconfig")
	must(t, os.WriteFile(cfg, []byte(kc), 0o600))
	c, err := New(cfg, time.Minute, nil)
	must(t, err)
	err = c.SetNetworkStatus(context.Background(), "default", "p", "", nadv1.NetworkStatus{Name: "n", Interface: "net1"})
	if err == nil || errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("got %v, want a certificate error, not unreachable", err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections: a certificate error was retried", n)
	}
}

func TestCancelledIsNotUnreachable(t *testing.T) {
	c := &Client{host: "https://192.0.2.1", timeout: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := c.retry(ctx, func(context.Context) (bool, error) {
		calls++
		cancel()
		return false, errors.New("connection refused")
	})
	if err == nil || errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "cancelled") || calls != 1 {
		t.Fatalf("got %v after %d calls, want a cancellation", err, calls)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// New takes its caller's bound; a zero or negative one is a mistake, not a default.
func TestNewNeedsATimeout(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: t}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := New(kc, d, nil); err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("New with timeout %v: %v", d, err)
		}
	}
	if _, err := New(kc, time.Second, nil); err != nil {
		t.Errorf("New with a timeout: %v", err)
	}
}
