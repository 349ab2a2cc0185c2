package agentproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// ErrUnavailable is every client error: the agent cannot serve this call, so
// the entry point does it itself (devplumb-direct). The wrapped message says
// which case it was.
var ErrUnavailable = errors.New("devplumb agent unavailable")

// DefaultCallTimeout bounds a Prepare or Commit whose context has no deadline.
const DefaultCallTimeout = 2 * time.Minute

// Client is one CNI call's connection to the agent. It is not safe for
// concurrent use: a call is hello, prepare, commit in order (a DEL's hello
// and prepare in one write, DialDel; an ADD's hello with its lookahead,
// DialAdd).
type Client struct {
	conn  net.Conn
	path  string
	Agent Hello // what the agent answered to hello
}

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %w", ErrUnavailable, fmt.Errorf(format, args...))
}

// Dial connects to the agent at path and exchanges hello within bound (the
// design's 1 s), telling the agent this entry point's build. It talks only
// to a root process listening in a directory only root may write: anything
// else is ErrUnavailable, before a byte is sent.
func Dial(path string, bound time.Duration, build string) (*Client, error) {
	c, err := connect(path, bound)
	if err != nil {
		return nil, err
	}
	if err := c.hello(build); err != nil {
		c.conn.Close()
		return nil, err
	}
	return c, nil
}

// DialAdd is Dial with the lookahead of an ADD's prepare sent with the
// hello: an agent may start what the prepare will read (the pod's
// PodResources Get) while the hello's answer travels, and the prepare,
// sent with Prepare once the hello is answered, waits less. The lookahead
// takes nothing: an entry point whose hello is not answered in time falls
// back without sending the prepare, as after Dial.
func DialAdd(path string, bound time.Duration, build string, p *Prepare) (*Client, error) {
	if p.Command != CmdAdd {
		return nil, fmt.Errorf("DialAdd of a %s: only an ADD's prepare is looked ahead", p.Command)
	}
	c, err := connect(path, bound)
	if err != nil {
		return nil, err
	}
	err = c.hello(build, &request{Lookahead: p})
	if errors.Is(err, ErrTooLarge) {
		// Nothing was sent: the hello goes alone, and the prepare, as
		// large, ends in ErrTooLarge as after Dial.
		err = c.hello(build)
	}
	if err != nil {
		c.conn.Close()
		return nil, err
	}
	return c, nil
}

// DialDel is Dial, then Prepare of a DEL, in one round trip less: the
// prepare is sent with the hello. A DEL's prepare changes nothing (one
// with no delegate to run is done at once, as a DEL done twice is), so an
// agent that reads it after the entry point gave up on its hello and fell
// back does nothing the fallback's DEL does not. An ADD's prepare takes a
// device: it waits for the hello (Dial, then Prepare). An agent that
// refuses the hello closes the connection without reading the prepare.
func DialDel(ctx context.Context, path string, bound time.Duration, build string, p *Prepare) (*Client, *PrepareAnswer, error) {
	if p.Command != CmdDel {
		return nil, nil, fmt.Errorf("DialDel of a %s: only a DEL's prepare may go with the hello", p.Command)
	}
	c, err := connect(path, bound)
	if err != nil {
		return nil, nil, err
	}
	if err := c.hello(build, &request{Prepare: p}); err != nil {
		c.conn.Close()
		return nil, nil, err
	}
	a, err := c.prepare(ctx) // the answer to the prepare sent with the hello
	if err != nil {
		c.conn.Close()
		return nil, nil, err
	}
	return c, a, nil
}

// connect connects to the agent at path, checked as Dial says, with the
// connection's deadline bound from now.
func connect(path string, bound time.Duration) (*Client, error) {
	if err := checkSocketDir(path); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(bound)
	d := net.Dialer{Deadline: deadline}
	conn, err := d.Dial("unix", path)
	if err != nil {
		return nil, dialError(path, bound, err)
	}
	if err := checkPeerRoot(conn, path); err != nil {
		conn.Close()
		return nil, err
	}
	if err := conn.SetDeadline(deadline); err != nil {
		conn.Close()
		return nil, unavailable("hello: %w", err)
	}
	return &Client{conn: conn, path: path}, nil
}

// dialError names why the socket could not be reached.
func dialError(path string, bound time.Duration, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return unavailable("no agent socket at %s: %w", path, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return unavailable("nobody listening on %s (a dead agent's socket): %w", path, err)
	case errors.Is(err, fs.ErrPermission):
		return unavailable("not allowed to connect to %s: %w", path, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return unavailable("no connection to %s within %v: %w", path, bound, err)
	}
	return unavailable("connect to %s: %w", path, err)
}

// hello exchanges hellos; with, requests sent in the same write.
func (c *Client) hello(build string, with ...*request) error {
	mine := Hello{Protocol: ProtocolVersion, Build: build}
	resp, err := c.roundTrip("hello", append([]*request{{Hello: &mine}}, with...)...)
	if err != nil {
		return err
	}
	if resp.Hello == nil {
		return unavailable("agent on %s refused the connection: %s", c.path, resp.Error)
	}
	c.Agent = *resp.Hello
	if resp.Hello.Protocol != ProtocolVersion {
		return unavailable("protocol version skew: entry point (build %s) speaks %d, agent (build %s) speaks %d",
			build, ProtocolVersion, resp.Hello.Build, resp.Hello.Protocol)
	}
	if resp.Error != "" {
		return unavailable("agent on %s refused hello: %s", c.path, resp.Error)
	}
	return nil
}

// Close ends the connection; the agent forgets nothing by it (records hold
// the state), so an entry point that dies mid-call leaves no harm behind.
func (c *Client) Close() error { return c.conn.Close() }

// Prepare sends the call's CNI command and arguments and returns the agent's
// answer, checked. ctx bounds the round trip (DefaultCallTimeout without a
// deadline).
func (c *Client) Prepare(ctx context.Context, p *Prepare) (*PrepareAnswer, error) {
	return c.prepare(ctx, &request{Prepare: p})
}

// prepare sends reqs (none: a prepare went before) and returns the answer
// to the prepare, checked.
func (c *Client) prepare(ctx context.Context, reqs ...*request) (*PrepareAnswer, error) {
	resp, err := c.call(ctx, "prepare", reqs...)
	if err != nil {
		return nil, err
	}
	return answer(resp.Prepare, "prepare")
}

// Commit reports the delegate's outcome and returns what to print.
func (c *Client) Commit(ctx context.Context, cm *Commit) (*CommitAnswer, error) {
	resp, err := c.call(ctx, "commit", &request{Commit: cm})
	if err != nil {
		return nil, err
	}
	return answer(resp.Commit, "commit")
}

// Rollback reports the delegates' DEL run after a CommitAnswer with Undo
// and returns whether the agent freed the device.
func (c *Client) Rollback(ctx context.Context, r *Rollback) (*RollbackAnswer, error) {
	resp, err := c.call(ctx, "rollback", &request{Rollback: r})
	if err != nil {
		return nil, err
	}
	return answer(resp.Rollback, "rollback")
}

// answer refuses an agent's missing or self-contradicting answer: the
// entry point falls back rather than guess.
func answer[A any, PA interface {
	*A
	check() error
}](a PA, kind string) (PA, error) {
	if _, err := checked(a, nil); err != nil {
		return nil, unavailable("%s answer: %w", kind, err)
	}
	return a, nil
}

// call is one round trip under ctx (roundTrip's): its deadline, and its
// cancellation cutting the wait short.
func (c *Client) call(ctx context.Context, kind string, reqs ...*request) (*response, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultCallTimeout)
	}
	// Set before the AfterFunc, so a cancellation's deadline is the last.
	if err := c.conn.SetDeadline(deadline); err != nil {
		return nil, unavailable("%s: %w", kind, err)
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Now()) })
	defer stop()
	resp, err := c.roundTrip(kind, reqs...)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	if err == nil && resp.Error != "" {
		return nil, unavailable("agent failed %s: %s", kind, resp.Error)
	}
	return resp, err
}

// roundTrip sends reqs in one write and reads the answer to the first by
// the connection's deadline; with none it reads the answer to a request
// sent before.
func (c *Client) roundTrip(kind string, reqs ...*request) (*response, error) {
	if err := writeFrame(c.conn, reqs...); err != nil {
		if errors.Is(err, ErrTooLarge) { // nothing was sent: the agent is fine
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		// A refused peer is answered and closed before it is read: the
		// refusal says more than the broken pipe.
		var resp response
		if readFrame(c.conn, &resp) == nil && resp.Error != "" {
			return &resp, nil
		}
		return nil, unavailable("%s to %s: %w", kind, c.path, err)
	}
	var resp response
	if err := readFrame(c.conn, &resp); err != nil {
		if err == io.EOF {
			return nil, unavailable("agent on %s closed the connection without a %s answer", c.path, kind)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, unavailable("no %s answer from %s in time: %w", kind, c.path, err)
		}
		return nil, unavailable("%s answer from %s: %w", kind, c.path, err)
	}
	return &resp, nil
}
