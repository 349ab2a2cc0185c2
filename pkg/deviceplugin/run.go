package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/devplumb/devplumb/pkg/base/dirwatch"
	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
)

// Run serves and registers until ctx ends, then stops serving and removes the
// socket. It re-registers whenever the kubelet restarts, and serves again
// when the plugin directory is removed and created again. It returns an
// error when the plugin cannot serve at all or the kubelet rejects its
// registration (ErrRegistrationRejected): a plugin that the kubelet refuses
// should stop with a clear error rather than wait forever. Call it once per
// Server.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("device plugin %s: Run called twice", s.cfg.ResourceName)
	}
	// Only the plugin dir itself is created, never its parents: a missing
	// parent means a wrong path (or a kubelet root that is not there yet),
	// and creating it would serve where no kubelet ever looks.
	if err := os.Mkdir(s.cfg.PluginDir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("device plugin %s: create plugin dir %s (its parent must exist; is the path right?): %w",
			s.cfg.ResourceName, s.cfg.PluginDir, err)
	}
	if err := s.CheckSocketFree(); err != nil {
		return err
	}
	// Watch before serving so that no kubelet restart falls between the two.
	w, err := dirwatch.New(s.cfg.PluginDir)
	if err != nil {
		return fmt.Errorf("device plugin %s: %w", s.cfg.ResourceName, err)
	}
	defer w.Close()
	l := &loop{s: s, w: w}
	defer l.shutdown()
	if err := l.restart(ctx); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-l.served:
			s.log.Warn("gRPC server ended, restarting", "err", err)
			err = l.restart(ctx)
			if err != nil {
				return err
			}
		case ev, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("device plugin %s: fsnotify watcher closed", s.cfg.ResourceName)
			}
			if err := l.event(ctx, ev); err != nil {
				return err
			}
		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("device plugin %s: fsnotify watcher closed", s.cfg.ResourceName)
			}
			if err := l.recheck(ctx, err); err != nil {
				return err
			}
		}
	}
}

// CheckSocketFree fails when another process serves the plugin's socket.
// Replacing a live plugin's socket would make the two fight (each serves
// again when its socket is removed, removing the other's), so Run refuses
// to; a daemon can call it before it touches anything else the live plugin
// owns. A socket file nobody answers on is stale and fine.
func (s *Server) CheckSocketFree() error {
	conn, err := net.DialTimeout("unix", s.socketPath, time.Second)
	if err != nil {
		return nil
	}
	conn.Close()
	return fmt.Errorf("device plugin %s: another plugin is serving %s; stop it first", s.cfg.ResourceName, s.socketPath)
}

// loop is Run's state; only Run's goroutine touches it.
type loop struct {
	s      *Server
	w      *dirwatch.Watcher
	srv    *grpc.Server // nil while not serving (plugin dir missing)
	served <-chan error // Serve's result; nil while not serving
}

// event reacts to one change in (or of) the plugin directory.
func (l *loop) event(ctx context.Context, ev fsnotify.Event) error {
	s := l.s
	change, err := l.w.Handle(ev)
	if err != nil {
		return fmt.Errorf("device plugin %s: %w", s.cfg.ResourceName, err)
	}
	switch change {
	case dirwatch.Gone:
		s.log.Warn("plugin dir removed; serving again when it is created", "dir", s.cfg.PluginDir)
		l.stopServing(false)
		s.reg = registration{}
		s.live.Store(false)
	case dirwatch.Back:
		s.log.Info("plugin dir created again: serving and registering", "dir", s.cfg.PluginDir)
		return l.restart(ctx)
	case dirwatch.InDir:
		return l.inDir(ctx, ev)
	}
	return nil
}

// inDir reacts to the two kubelet restart signals in the plugin directory.
// Events arrive after the fact: by the time one is handled the kubelet may
// have created kubelet.sock again and taken our registration, so each case
// looks at the file system now rather than trusting the event alone.
func (l *loop) inDir(ctx context.Context, ev fsnotify.Event) error {
	s := l.s
	switch {
	case ev.Name == s.kubeletSock && ev.Has(fsnotify.Remove|fsnotify.Rename):
		// Not registered any more only if the kubelet.sock we registered
		// with is gone: a stale removal must not lead to a second
		// registration with the new kubelet (1.37 refuses it and then loses
		// track of our connection).
		if statSock(s.kubeletSock) != s.reg.kubelet {
			s.live.Store(false)
		}
	case ev.Name == s.kubeletSock && ev.Has(fsnotify.Create):
		// After a kubelet restart the removal of our socket usually comes
		// first and already registered us with this kubelet.sock.
		if s.registeredWithCurrent() {
			return nil
		}
		s.log.Info("kubelet.sock created: registering again")
		return s.register(ctx)
	case ev.Name == s.socketPath && ev.Has(fsnotify.Remove|fsnotify.Rename):
		// Our own restart removes and re-creates the socket too; a socket that
		// exists again needs nothing.
		if _, err := os.Stat(s.socketPath); err == nil {
			return nil
		}
		s.log.Info("plugin socket removed: serving and registering again")
		return l.restart(ctx)
	}
	return nil
}

// recheck follows a watcher error: an overflow may have hidden a kubelet
// restart, so both signals are checked from the file system.
func (l *loop) recheck(ctx context.Context, werr error) error {
	s := l.s
	s.log.Warn("fsnotify error; checking the sockets", "err", werr)
	if l.w.Missing() {
		return nil
	}
	if _, err := os.Stat(s.socketPath); err != nil {
		return l.restart(ctx)
	}
	if statSock(s.kubeletSock).valid() && !s.registeredWithCurrent() {
		return s.register(ctx)
	}
	return nil
}

// restart serves on a fresh socket and registers it. A missing plugin
// directory is not an error: its Gone and Back events follow.
func (l *loop) restart(ctx context.Context) error {
	s := l.s
	// A kubelet that restarts removes our socket while its dead predecessor's
	// kubelet.sock is still there: only a live kubelet needs the delay below.
	sameKubelet := s.live.Load() && statSock(s.kubeletSock) == s.reg.kubelet && answers(s.kubeletSock)
	l.stopServing(false)
	srv, served, err := s.serve()
	if err != nil {
		// The directory may be gone when Listen ran and back by now: its
		// Gone and Back events are queued, and Back serves again.
		if _, serr := os.Stat(s.cfg.PluginDir); errors.Is(err, os.ErrNotExist) || errors.Is(serr, os.ErrNotExist) {
			s.log.Warn("plugin dir is gone; serving again when it is created", "dir", s.cfg.PluginDir)
			return nil
		}
		return fmt.Errorf("device plugin %s: serve: %w", s.cfg.ResourceName, err)
	}
	l.srv, l.served = srv, served
	s.servedGen++
	if sameKubelet {
		// This kubelet holds a connection to our old server and drops it
		// when it sees it close (we just stopped that server). Kubelet 1.37
		// refuses our socket until then, and a registration that arrives
		// while it drops the old connection is forgotten with it.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(reconnectDelay):
		}
	}
	return s.registerIfKubelet(ctx)
}

// answers: a process accepts connections on the unix socket at path.
func answers(path string) bool {
	conn, err := net.DialTimeout("unix", path, 100*time.Millisecond)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// reconnectDelay is how long a plugin that served again waits before it
// registers again with the same kubelet; the kubelet drops a closed
// connection within milliseconds.
const reconnectDelay = 500 * time.Millisecond

// stopServing stops the gRPC server, gracefully when asked.
func (l *loop) stopServing(graceful bool) {
	if l.srv == nil {
		return
	}
	srv := l.srv
	l.srv, l.served = nil, nil
	if !graceful {
		srv.Stop()
		return
	}
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second): // a stuck client must not block the stop
		srv.Stop()
		<-done
	}
}

// shutdown ends the streams, stops serving and removes the socket.
func (l *loop) shutdown() {
	s := l.s
	close(s.stopped) // ends ListAndWatch streams so GracefulStop can finish
	s.live.Store(false)
	l.stopServing(true)
	if err := os.Remove(s.socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("remove socket", "socket", s.socketPath, "err", err)
	}
	s.log.Info("device plugin stopped")
}
