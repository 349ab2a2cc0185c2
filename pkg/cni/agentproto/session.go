package agentproto

import (
	"context"
	"errors"
	"fmt"
)

// session is one connection's state: the hello must come first, once, and
// one call is prepared per connection, so what a connection can leave
// prepared in the agent is one call's.
type session struct {
	h           Handler
	helloed     bool
	lookedAhead bool
	prepared    bool
}

// handle answers one request. An error ends the connection: it is answered
// as the response's Error by the caller.
func (s *session) handle(ctx context.Context, req *request) (*response, error) {
	kind, err := req.kind()
	if err != nil {
		return nil, err
	}
	if kind != "hello" && !s.helloed {
		return nil, fmt.Errorf("%s before hello", kind)
	}
	switch kind {
	case "hello":
		return s.hello(req.Hello)
	case "lookahead":
		return nil, s.lookahead(ctx, req.Lookahead)
	case "prepare":
		return s.prepare(ctx, req.Prepare)
	case "rollback":
		return s.rollback(ctx, req.Rollback)
	default:
		return s.commit(ctx, req.Commit)
	}
}

func (s *session) hello(h *Hello) (*response, error) {
	if s.helloed {
		return nil, errors.New("second hello on one connection")
	}
	mine := &Hello{Protocol: ProtocolVersion, Build: s.h.Build()}
	if h.Protocol != ProtocolVersion {
		// Answered with our Hello too, so the entry point can log both.
		return &response{Hello: mine, Error: fmt.Sprintf("protocol version %d (build %s) not served: the agent (build %s) speaks %d",
			h.Protocol, h.Build, mine.Build, ProtocolVersion)}, nil
	}
	s.helloed = true
	return &response{Hello: mine}, nil
}

// lookahead hands an ADD's coming prepare to a LookaheadHandler (others
// need nothing of it); it is never answered. It comes once, after the hello
// and before the prepare.
func (s *session) lookahead(ctx context.Context, p *Prepare) error {
	switch {
	case s.lookedAhead || s.prepared:
		return errors.New("lookahead after a lookahead or a prepare: it goes with the hello")
	case p.Command != CmdAdd:
		return fmt.Errorf("lookahead of a %s: only an ADD's prepare is looked ahead", p.Command)
	}
	if err := p.check(); err != nil {
		return fmt.Errorf("lookahead: %w", err)
	}
	s.lookedAhead = true
	if lh, ok := s.h.(LookaheadHandler); ok {
		lh.Lookahead(ctx, p)
	}
	return nil
}

func (s *session) prepare(ctx context.Context, p *Prepare) (*response, error) {
	if s.prepared {
		return nil, errors.New("second prepare on one connection: one CNI call per connection")
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	s.prepared = true
	a, err := checked(s.h.Prepare(ctx, p))
	if err != nil {
		return nil, fmt.Errorf("prepare %s %s/%s: %w", p.Command, p.ContainerID, p.IfName, err)
	}
	return &response{Prepare: a}, nil
}

func (s *session) commit(ctx context.Context, c *Commit) (*response, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	a, err := checked(s.h.Commit(ctx, c))
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", c.Attachment, err)
	}
	return &response{Commit: a}, nil
}

func (s *session) rollback(ctx context.Context, r *Rollback) (*response, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	rh, ok := s.h.(RollbackHandler)
	if !ok {
		return nil, fmt.Errorf("rollback %s: this agent never asks for an undo", r.Attachment)
	}
	a, err := checked(rh.Rollback(ctx, r))
	if err != nil {
		return nil, fmt.Errorf("rollback %s: %w", r.Attachment, err)
	}
	return &response{Rollback: a}, nil
}

// checked refuses a handler's missing or self-contradicting answer here, so
// the entry point never has to guess what to do.
func checked[A any, PA interface {
	*A
	check() error
}](a PA, err error) (PA, error) {
	if err == nil && a == nil {
		err = errors.New("no answer")
	}
	if err == nil {
		err = a.check()
	}
	return a, err
}
