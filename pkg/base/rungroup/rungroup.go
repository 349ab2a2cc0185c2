// Package rungroup runs a daemon's servers side by side and stops them
// together: every server gets one context, which ends when the daemon's does
// or when any server fails, so one plugin that cannot serve stops the daemon
// instead of leaving it half up. netdev-dp and cdi-adapter serve their
// resources' device plugins with it.
package rungroup

import (
	"context"
	"sync"
)

// Run calls every fn in its own goroutine with a context derived from ctx,
// cancels that context at the first fn that returns an error, waits for all
// of them and returns that first error (nil when they all ended without
// one). A fn that returns nil stops only itself: servers end with nil when
// their context ends.
func Run(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, fn := range fns {
		wg.Go(func() {
			if err := fn(ctx); err != nil {
				once.Do(func() { first = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}
