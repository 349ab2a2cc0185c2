package agentproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/types"
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

// LookaheadHandler is a Handler that starts, on an ADD's lookahead, what
// the prepare to come on the same connection will read: the prepare then
// waits less. It must not take or write anything (the prepare may never
// come: the entry point fell back), and what it started is the prepare's
// only if the prepare is the same call (the connection of ctx, ConnOf);
// it gives it up when ctx ends.
type LookaheadHandler interface {
	Handler
	Lookahead(ctx context.Context, p *Prepare)
}

// Defaults of Server's waits and caps.
const (
	DefaultHelloWait  = time.Second
	DefaultCommitWait = 5 * time.Minute
	// DefaultFrameWait bounds a frame from its first byte to its last: a
	// peer has the commit wait to start its next request (the delegates run
	// in between), not to trickle it in.
	DefaultFrameWait = 5 * time.Second
	// DefaultMaxConns is more than a node's pods attach at once (a burst of
	// 110 pods on 2 CPUs keeps far fewer calls open): beyond it, calls fall
	// back to devplumb-direct rather than queue.
	DefaultMaxConns = 128
	// DefaultMaxInflight is two frames of the maximum: the agent's requests
	// are kilobytes, and its DaemonSet's memory limit (96 MiB) must hold
	// what peers send plus its caches.
	DefaultMaxInflight = 2 * MaxFrame
	// DefaultBudgetWait is how long a frame waits for bytes of the budget
	// before the connection is refused.
	DefaultBudgetWait = time.Second
	writeWait         = 5 * time.Second
	refuseWait        = 100 * time.Millisecond
)

// Server serves Handler on a listener. The zero values of its fields are the
// defaults.
type Server struct {
	Handler Handler
	Log     *slog.Logger // nil: slog.Default()
	// HelloWait bounds how long a new connection may stay silent; the entry
	// point gives up on its own hello far sooner.
	HelloWait time.Duration
	// CommitWait bounds the wait for each later request to begin. The
	// delegate runs between prepare and commit, so it is the runtime's CNI
	// timeout, not the hello's: a silent client still frees its goroutine
	// in the end.
	CommitWait time.Duration
	// FrameWait bounds each frame once its first byte came.
	FrameWait time.Duration
	// MaxConns bounds the connections served at once; one more is answered
	// a refusal and closed at once.
	MaxConns int
	// MaxInflight bounds the bytes of requests all connections hold: a
	// connection takes them as its frames arrive and gives them back when
	// it ends. Below 2*MaxFrame it is raised to that, so one call of the
	// largest frames always fits.
	MaxInflight int64
	// BudgetWait bounds a frame's wait for MaxInflight bytes others hold;
	// then its connection is refused.
	BudgetWait time.Duration
}

// Serve serves h on l with the default waits and logger.
func Serve(ctx context.Context, l net.Listener, h Handler) error {
	return (&Server{Handler: h}).Serve(ctx, l)
}

// Serve accepts connections until ctx ends, then closes l and the open
// connections and waits for their goroutines. A bad connection is answered
// an error, closed and logged; it never stops the server.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	conns := &connSet{max: s.MaxConns}
	if conns.max <= 0 {
		conns.max = DefaultMaxConns
	}
	b := newBudget(max(s.MaxInflight, 2*MaxFrame))
	stop := context.AfterFunc(ctx, func() {
		l.Close()
		conns.closeAll()
	})
	defer stop()
	w := NewWorkers(WorkerIdle)
	defer w.Stop()
	defer conns.wg.Wait()
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
		switch err := conns.add(c); {
		case errors.Is(err, errStopping):
			c.Close()
			return nil
		case err != nil:
			s.refuse(c, fmt.Errorf("%w: %d served at once, the most this agent serves", err, conns.max))
			continue
		}
		conns.wg.Add(1)
		w.Go(func() {
			defer conns.wg.Done()
			s.serveConn(ctx, c, b)
			conns.remove(c)
		})
	}
}

// refuse answers a connection the server cannot take and closes it at once:
// the entry point falls back to devplumb-direct instead of waiting. The
// answer is a few bytes on a fresh connection, so the write does not block.
func (s *Server) refuse(c net.Conn, err error) {
	defer c.Close()
	s.log().Warn("agent connection refused", "err", err)
	c.SetWriteDeadline(time.Now().Add(refuseWait))
	_ = writeFrame(c, &response{Error: err.Error()}) // best effort
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

// readRequest reads one request: its first byte within wait, the rest within
// FrameWait of it (and within wait, for the hello), its bytes taken from h.
// io.EOF (unwrapped) is a clean end.
func (s *Server) readRequest(c net.Conn, wait time.Duration, h *held) (*request, error) {
	deadline := time.Now().Add(wait)
	if err := c.SetReadDeadline(deadline); err != nil {
		return nil, fmt.Errorf("read request: %w", err)
	}
	frameWait := orDefault(s.FrameWait, DefaultFrameWait)
	began := false
	fr := frameReader{take: h.take, started: func() error {
		began = true
		if d := time.Now().Add(frameWait); d.Before(deadline) {
			return c.SetReadDeadline(d)
		}
		return nil
	}}
	var req request
	err := fr.read(c, &req)
	switch {
	case err == nil || err == io.EOF:
		return &req, err
	case errors.Is(err, os.ErrDeadlineExceeded) && !began:
		return nil, fmt.Errorf("no request within %v: %w", wait, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, fmt.Errorf("request not complete within %v of its first byte: %w", min(frameWait, wait), err)
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
func (s *Server) serveConn(ctx context.Context, c net.Conn, b *budget) {
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
	h := &held{b: b, wait: orDefault(s.BudgetWait, DefaultBudgetWait)}
	defer h.release()
	ctx, end := withConn(ctx, &Conn{PeerPID: cred.Pid})
	defer end() // before the release: the handler drops what the connection left
	sess := session{h: s.Handler}
	for {
		wait := orDefault(s.CommitWait, DefaultCommitWait)
		if !sess.helloed {
			wait = orDefault(s.HelloWait, DefaultHelloWait)
		}
		req, err := s.readRequest(c, wait, h)
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
		if resp == nil { // a lookahead: not answered
			continue
		}
		if err := s.send(c, log, resp); err != nil {
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
	_ = s.send(c, log, &response{Error: err.Error()}) // best effort: the peer may be gone
}

// send writes resp. An answer too large for a frame is answered as the CNI
// error it is: a closed connection would send the entry point to
// devplumb-direct with the same config.
func (s *Server) send(c net.Conn, log *slog.Logger, resp *response) error {
	buf, err := encodeFrame(resp)
	if errors.Is(err, ErrTooLarge) {
		log.Warn("agent answer too large for a frame: answered as a CNI error", "err", err)
		buf, err = encodeFrame(tooLarge(resp, err))
	}
	if err != nil {
		return err
	}
	c.SetWriteDeadline(time.Now().Add(writeWait))
	if _, err := c.Write(buf); err != nil {
		return fmt.Errorf("send frame: %w", err)
	}
	return nil
}

// tooLarge is what answers resp when resp does not fit in a frame: the
// prepare's or commit's CNI error (code 7: the config makes it so large),
// keeping a commit's Undo, so the entry point still runs the delegates' DEL.
func tooLarge(resp *response, err error) *response {
	te := types.NewError(types.ErrInvalidNetworkConfig,
		"the network config is too large for the devplumb agent: its answer does not fit in a frame", err.Error())
	switch {
	case resp.Prepare != nil:
		return &response{Prepare: &PrepareAnswer{Error: te}}
	case resp.Commit != nil:
		return &response{Commit: &CommitAnswer{Error: te, Undo: resp.Commit.Undo}}
	}
	return &response{Error: te.Error()}
}
