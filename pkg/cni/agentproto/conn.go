package agentproto

import (
	"context"
	"errors"
	"net"
	"sync"
)

// Conn is one connection the Server serves, as its Handler sees it: the
// context of every request on it carries it (ConnOf), and that context ends
// when the connection does. A handler ties what a request leaves behind (a
// prepared call) to it, so that only this connection may finish it and so
// that it is dropped when the connection ends without finishing it.
type Conn struct {
	// PeerPID is the connecting process (SO_PEERCRED), for logs.
	PeerPID int32
}

type connKey struct{}

// ConnOf is the connection a handler's context belongs to; nil outside a
// Server (a handler called directly).
func ConnOf(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

// withConn is ctx for the requests of one connection: it carries the
// connection and ends when end is called (the connection is over).
func withConn(ctx context.Context, c *Conn) (context.Context, context.CancelFunc) {
	return context.WithCancel(context.WithValue(ctx, connKey{}, c))
}

var (
	errStopping = errors.New("the agent is stopping")
	errFull     = errors.New("too many connections")
)

// connSet is the connections a Server serves, at most max at once.
type connSet struct {
	max     int
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	stopped bool
}

// add counts c in, or refuses it when the set is full or stopped.
func (s *connSet) add(c net.Conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped: // closeAll ran already: it would miss c
		return errStopping
	case len(s.conns) >= s.max:
		return errFull
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return nil
}

func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// closeAll closes every connection and refuses new ones.
func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for c := range s.conns {
		// Lost mid-call is what the entry point's fallback is for.
		c.Close()
	}
}
