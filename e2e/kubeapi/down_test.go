package kubeapi_test

import (
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

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/cni/kube"
)

// slack is what a bounded call may take beyond its own bound (process scheduling on a
// loaded 2-core machine). It checks that the bound is honoured, not how fast anything is.
const slack = 10 * time.Second

func TestAPIServerDown(t *testing.T) {
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "down", nodeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	const bound = 2 * time.Second
	c := newClient(t, bound)
	srv.StopAPIServer()
	t.Cleanup(func() {
		if err := srv.StartAPIServer(); err != nil {
			t.Fatalf("restart API server: %v", err)
		}
	})

	start := time.Now()
	err = c.SetNetworkStatus(e2etest.Ctx(t), "default", "down", string(pod.UID), pciEntry("default/x", "net1", "0000:00:01.0"))
	assertUnreachable(t, "ADD", err, start, bound)

	start = time.Now()
	err = c.RemoveNetworkStatus(e2etest.Ctx(t), "default", "down", string(pod.UID), "default/x", "net1")
	assertUnreachable(t, "DEL", err, start, bound)

	start = time.Now()
	_, err = c.NADResourceName(e2etest.Ctx(t), "default", "x")
	assertUnreachable(t, "NAD lookup", err, start, bound)
}

// TestAPIServerHangs: a server that accepts connections and never answers is unreachable
// too, within the same bound.
func TestAPIServerHangs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn // keep them open and silent
		for {
			conn, err := l.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, conn)
		}
	}()
	const bound = 2 * time.Second
	c := clientFor(t, "https://"+l.Addr().String(), bound)
	start := time.Now()
	err = c.SetNetworkStatus(e2etest.Ctx(t), "default", "p", "", pciEntry("default/x", "net1", "0000:00:01.0"))
	assertUnreachable(t, "ADD", err, start, bound)
}

func assertUnreachable(t *testing.T, what string, err error, start time.Time, bound time.Duration) {
	t.Helper()
	took := time.Since(start)
	if !errors.Is(err, kube.ErrUnreachable) {
		t.Fatalf("%s with the API server down: got %v, want ErrUnreachable", what, err)
	}
	if !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), bound.String()) {
		t.Errorf("%s: error does not say the server was unreachable within %s: %v", what, bound, err)
	}
	if took > bound+slack {
		t.Errorf("%s took %s, bound is %s", what, took, bound)
	}
	t.Logf("%s: %v", what, err)
}

// TestAPIServerOverloaded: a server that keeps answering 503 is retried within the bound,
// then reported with its last answer (not as unreachable: it did answer).
func TestAPIServerOverloaded(t *testing.T) {
	var calls atomic.Int32
	hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"overloaded","reason":"ServiceUnavailable","code":503}`)
	}))
	defer hs.Close()
	const bound = 2 * time.Second
	c := clientFor(t, hs.URL, bound)
	start := time.Now()
	err := c.SetNetworkStatus(e2etest.Ctx(t), "default", "p", "", pciEntry("default/x", "net1", "0000:00:01.0"))
	took := time.Since(start)
	if err == nil || errors.Is(err, kube.ErrUnreachable) || !strings.Contains(err.Error(), "kept failing") ||
		!strings.Contains(err.Error(), "overloaded") {
		t.Fatalf("got %v, want a 'kept failing' error carrying the server's message", err)
	}
	if calls.Load() < 2 {
		t.Errorf("503 was not retried (%d calls)", calls.Load())
	}
	if took > bound+slack {
		t.Errorf("took %s, bound is %s", took, bound)
	}
}

// clientFor is a devplumb client for a stand-in server at url.
func clientFor(t *testing.T, url string, bound time.Duration) *kube.Client {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "kubeconfig")
	e2etest.Must(t, os.WriteFile(cfg, []byte(kubeapi.Kubeconfig(url, "x")), 0o600))
	c, err := kube.New(cfg, bound, nil)
	e2etest.Must(t, err)
	return c
}

// TestAPIServerSlow: a server that answers every request, but each one late, is cut off at
// the bound as unreachable: slow answers must not add up beyond it.
func TestAPIServerSlow(t *testing.T) {
	const bound = 2 * time.Second
	release := make(chan struct{})
	hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // later than one request may wait (half the bound), within the bound
		case <-time.After(bound * 7 / 10):
		case <-release:
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"default","uid":"u1","resourceVersion":"7"}}`)
	}))
	defer func() { close(release); hs.Close() }()
	c := clientFor(t, hs.URL, bound)
	start := time.Now()
	err := c.SetNetworkStatus(e2etest.Ctx(t), "default", "p", "u1", pciEntry("default/x", "net1", "0000:00:01.0"))
	assertUnreachable(t, "ADD", err, start, bound)
}
