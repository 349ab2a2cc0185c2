package agent

import (
	"context"
	"sync"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
)

// lookaheads holds what each connection's lookahead started (an ADD's
// PodResources Get) until the prepare on that connection takes it; a
// connection that ends first gives it up. A lookahead takes nothing, so an
// entry point that falls back after it leaves nothing behind.
type lookaheads struct {
	mu sync.Mutex
	m  map[*agentproto.Conn]*plugin.Ahead
}

// put keeps ahead for the connection of ctx until take or the connection's end.
func (l *lookaheads) put(ctx context.Context, ahead *plugin.Ahead) {
	conn := agentproto.ConnOf(ctx)
	if ahead == nil || conn == nil {
		ahead.Close()
		return
	}
	l.mu.Lock()
	if l.m == nil {
		l.m = map[*agentproto.Conn]*plugin.Ahead{}
	}
	l.m[conn] = ahead
	l.mu.Unlock()
	context.AfterFunc(ctx, func() { l.take(ctx).Close() })
}

// take removes and returns what the lookahead of the connection of ctx
// started; nil when none.
func (l *lookaheads) take(ctx context.Context) *plugin.Ahead {
	conn := agentproto.ConnOf(ctx)
	if conn == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ahead := l.m[conn]
	delete(l.m, conn)
	return ahead
}

// len is the number of lookaheads not yet taken.
func (l *lookaheads) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
