package metricsserver

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// bound is how long the server may take to do what a test waits for: a bound on a wait,
// not a speed assertion.
const bound = 10 * time.Second

func serve(t *testing.T, lim limits) string {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	addr, stop, err := start("--listen", "127.0.0.1:0", h, nil, lim, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr.String()
}

// get sends one keep-alive request on c and reads its answer.
func get(c net.Conn, r *bufio.Reader) error {
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// closedByServer waits up to bound for the server to close c (a read sees EOF).
func closedByServer(t *testing.T, c net.Conn, r *bufio.Reader, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(bound))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("%s: the server did not close the connection within %s: %v", what, bound, err)
	}
}

// A keep-alive connection that sends no next request is closed after the idle timeout,
// and one that never finishes its request header after the header timeout.
func TestIdleConnectionsClosed(t *testing.T) {
	addr := serve(t, limits{readHeader: 300 * time.Millisecond, read: time.Minute, write: time.Minute,
		idle: 300 * time.Millisecond, conns: 4})
	idle := dial(t, addr)
	r := bufio.NewReader(idle)
	if err := get(idle, r); err != nil {
		t.Fatalf("first request: %v", err)
	}
	closedByServer(t, idle, r, "idle after a request")

	slow := dial(t, addr)
	if _, err := io.WriteString(slow, "GET /metrics HTTP/1.1\r\n"); err != nil { // and never the rest
		t.Fatal(err)
	}
	closedByServer(t, slow, bufio.NewReader(slow), "a header never finished")
}

// Past the cap a connection is not served while the cap is held, and is served once
// one of the held connections closes.
func TestConnectionCap(t *testing.T) {
	addr := serve(t, limits{readHeader: time.Minute, read: time.Minute, write: time.Minute, idle: time.Minute, conns: 2})
	held := []net.Conn{dial(t, addr), dial(t, addr)}
	for _, c := range held { // both accepted and served: they hold the cap
		if err := get(c, bufio.NewReader(c)); err != nil {
			t.Fatalf("a connection within the cap: %v", err)
		}
	}
	extra := dial(t, addr) // the kernel completes the connect; the server does not accept it
	r := bufio.NewReader(extra)
	done := make(chan error, 1)
	go func() { done <- get(extra, r) }()
	select {
	case err := <-done:
		t.Fatalf("a connection past the cap was served while the cap was held: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	held[0].Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the connection past the cap, after one closed: %v", err)
		}
	case <-time.After(bound):
		t.Errorf("the connection past the cap was not served within %s of one closing", bound)
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
