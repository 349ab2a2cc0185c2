package agentproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// Handler is the agent's side of a call. An error it returns is answered as
// a failure of the agent (the entry point falls back to devplumb-direct); a
// CNI error the runtime should see goes in the answer's Error instead.
type Handler interface {
	Build() string // the agent's build version, answered to every hello
	Prepare(ctx context.Context, p *Prepare) (*PrepareAnswer, error)
	Commit(ctx context.Context, c *Commit) (*CommitAnswer, error)
}

// RollbackHandler is a Handler that may answer a commit with Undo: it must
// then serve the Rollback that follows. Apart from Handler so that handlers
// that never ask for an undo need not implement it.
type RollbackHandler interface {
	Handler
	Rollback(ctx context.Context, r *Rollback) (*RollbackAnswer, error)
}

// Defaults of Server's waits.
const (
	DefaultHelloWait  = time.Second
	DefaultCommitWait = 5 * time.Minute
	writeWait         = 5 * time.Second
)

// Server serves Handler on a listener. The zero values of its fields are the
// defaults.
type Server struct {
	Handler Handler
	Log     *slog.Logger // nil: slog.Default()
	// HelloWait bounds how long a new connection may stay silent; the entry
	// point gives up on its own hello far sooner.
	HelloWait time.Duration
	// CommitWait bounds the wait for each later request. The delegate runs
	// between prepare and commit, so it is the runtime's CNI timeout, not
	// the hello's: a silent client still frees its goroutine in the end.
	CommitWait time.Duration
}

// Serve serves h on l with the default waits and logger.
func Serve(ctx context.Context, l net.Listener, h Handler) error {
	return (&Server{Handler: h}).Serve(ctx, l)
}

// Serve accepts connections until ctx ends, then closes l and the open
// connections and waits for their goroutines. A bad connection is answered
// an error, closed and logged; it never stops the server.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	stop := context.AfterFunc(ctx, func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range conns {
			// Lost mid-call is what the entry point's fallback is for.
			c.Close()
		}
	})
	defer stop()
	defer wg.Wait()
	backoff := time.Duration(0)
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept agent connection: %w", err)
			}
			// Out of descriptors and the like: wait for some to free up
			// instead of ending the agent or spinning.
			backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
			s.log().Warn("agent connection: accept failed, retrying", "err", err, "in", backoff)
			sleep(ctx, backoff)
			continue
		}
		backoff = 0
		mu.Lock()
		if ctx.Err() != nil { // the AfterFunc may have run already: it would miss c
			mu.Unlock()
			c.Close()
			return nil
		}
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			s.serveConn(ctx, c)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		})
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// readRequest reads one request within wait; io.EOF (unwrapped) is a clean end.
func readRequest(c net.Conn, wait time.Duration) (*request, error) {
	if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return nil, fmt.Errorf("read request: %w", err)
	}
	var req request
	err := readFrame(c, &req)
	switch {
	case err == nil || err == io.EOF:
		return &req, err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, fmt.Errorf("no request within %v: %w", wait, err)
	}
	return nil, fmt.Errorf("read request: %w", err)
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// orDefault is d, or def when d is unset.
func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// serveConn checks the peer, then answers requests until the peer closes,
// a request is bad, or a wait runs out.
func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	log := s.log().With("component", "agentproto")
	cred, err := peerCred(c)
	if err == nil && cred.Uid != 0 {
		err = fmt.Errorf("peer uid %d (pid %d) refused: the agent serves root only", cred.Uid, cred.Pid)
	}
	if err != nil {
		s.fail(c, log, err)
		return
	}
	log = log.With("peer_pid", cred.Pid)
	sess := session{h: s.Handler}
	for {
		wait := orDefault(s.CommitWait, DefaultCommitWait)
		if !sess.helloed {
			wait = orDefault(s.HelloWait, DefaultHelloWait)
		}
		req, err := readRequest(c, wait)
		if err != nil {
			// io.EOF: the peer is done; net.ErrClosed: the server stops.
			if err != io.EOF && !errors.Is(err, net.ErrClosed) {
				s.fail(c, log, err)
			}
			return
		}
		resp, err := sess.handle(ctx, req)
		if err != nil {
			s.fail(c, log, err)
			return
		}
		if err := s.send(c, resp); err != nil {
			log.Warn("agent connection: cannot answer", "err", err)
			return
		}
		if resp.Error != "" { // a refused hello: nothing more to serve
			log.Warn("agent connection refused", "err", resp.Error)
			return
		}
	}
}

// fail answers err when the peer still reads, and logs it; the caller
// closes the connection.
func (s *Server) fail(c net.Conn, log *slog.Logger, err error) {
	log.Warn("agent connection refused or failed", "err", err)
	_ = s.send(c, &response{Error: err.Error()}) // best effort: the peer may be gone
}

func (s *Server) send(c net.Conn, resp *response) error {
	c.SetWriteDeadline(time.Now().Add(writeWait))
	return writeFrame(c, resp)
}
