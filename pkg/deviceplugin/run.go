package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// registerAttempts bounds the retries of one registration: kubelet.sock can
// exist a moment before the kubelet accepts connections on it.
const registerAttempts = 8

// Run serves and registers until ctx ends, then stops serving and removes the
// socket. It re-registers whenever the kubelet restarts. It returns an error
// only when the plugin cannot serve at all. Call it once per Server.
func (s *Server) Run(ctx context.Context) error {
	if err := os.MkdirAll(s.cfg.PluginDir, 0o755); err != nil {
		return fmt.Errorf("device plugin %s: create plugin dir: %w", s.cfg.ResourceName, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("device plugin %s: fsnotify: %w", s.cfg.ResourceName, err)
	}
	defer w.Close()
	// Watch before serving so that no kubelet restart falls between the two.
	if err := w.Add(s.cfg.PluginDir); err != nil {
		return fmt.Errorf("device plugin %s: watch %s: %w", s.cfg.ResourceName, s.cfg.PluginDir, err)
	}
	srv, served, err := s.serve()
	if err != nil {
		return fmt.Errorf("device plugin %s: %w", s.cfg.ResourceName, err)
	}
	defer func() { s.shutdown(srv) }()
	s.registerIfKubelet(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			s.log.Warn("gRPC server ended, restarting", "err", err)
			if srv, served, err = s.restart(ctx, srv); err != nil {
				return err
			}
		case ev, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("device plugin %s: fsnotify watcher closed", s.cfg.ResourceName)
			}
			if srv, served, err = s.handleEvent(ctx, ev, srv, served); err != nil {
				return err
			}
		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("device plugin %s: fsnotify watcher closed", s.cfg.ResourceName)
			}
			// An overflow may have hidden a kubelet restart: check both signals.
			s.log.Warn("fsnotify error; checking the sockets", "err", err)
			if _, serr := os.Stat(s.socketPath); serr != nil {
				if srv, served, err = s.restart(ctx, srv); err != nil {
					return err
				}
			} else if ino := inode(s.kubeletSock); ino != 0 && ino != s.registeredIno {
				s.register(ctx)
			}
		}
	}
}

// handleEvent reacts to the two kubelet restart signals.
func (s *Server) handleEvent(ctx context.Context, ev fsnotify.Event, srv *grpc.Server, served <-chan error) (*grpc.Server, <-chan error, error) {
	switch {
	case ev.Name == s.kubeletSock && ev.Has(fsnotify.Create):
		// After a kubelet restart the removal of our socket usually comes
		// first and already registered us with this kubelet.sock.
		if ino := inode(s.kubeletSock); ino != 0 && ino == s.registeredIno {
			return srv, served, nil
		}
		s.log.Info("kubelet.sock created: registering again")
		s.register(ctx)
	case ev.Name == s.socketPath && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
		// Our own restart removes and re-creates the socket too; a socket that
		// exists again needs nothing.
		if _, err := os.Stat(s.socketPath); err == nil {
			return srv, served, nil
		}
		s.log.Info("plugin socket removed: serving and registering again")
		return s.restart(ctx, srv)
	}
	return srv, served, nil
}

// restart serves on a fresh socket and registers it.
func (s *Server) restart(ctx context.Context, old *grpc.Server) (*grpc.Server, <-chan error, error) {
	old.Stop()
	srv, served, err := s.serve()
	if err != nil {
		return nil, nil, fmt.Errorf("device plugin %s: restart: %w", s.cfg.ResourceName, err)
	}
	s.registerIfKubelet(ctx)
	return srv, served, nil
}

// shutdown ends the streams, stops serving and removes the socket.
func (s *Server) shutdown(srv *grpc.Server) {
	close(s.stopped) // ends ListAndWatch streams so GracefulStop can finish
	if srv != nil {
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second): // a stuck client must not block the stop
			srv.Stop()
		}
	}
	if err := os.Remove(s.socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("remove socket", "socket", s.socketPath, "err", err)
	}
	s.log.Info("device plugin stopped")
}

// registerIfKubelet registers when kubelet.sock exists; otherwise its
// creation event will.
func (s *Server) registerIfKubelet(ctx context.Context) {
	if _, err := os.Stat(s.kubeletSock); err != nil {
		s.log.Info("kubelet.sock not there yet; waiting for it", "path", s.kubeletSock)
		return
	}
	s.register(ctx)
}

// register calls Registration.Register, retrying briefly with backoff.
func (s *Server) register(ctx context.Context) {
	delay := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// A kubelet that restarted meanwhile removed our socket: registering
		// it would be refused. Its Remove event is queued and leads to a
		// fresh socket and registration.
		if _, err := os.Stat(s.socketPath); err != nil {
			s.log.Info("plugin socket gone; registering after it is served again")
			return
		}
		ino := inode(s.kubeletSock)
		err := s.registerOnce(ctx)
		if err == nil {
			s.registeredIno = ino
			s.mu.Lock()
			s.regs++
			s.mu.Unlock()
			s.log.Info("registered with kubelet", "endpoint", s.cfg.Endpoint)
			return
		}
		if attempt == registerAttempts || ctx.Err() != nil {
			s.log.Error("registration with kubelet failed; waiting for the kubelet to restart", "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay *= 2
	}
}

func (s *Server) registerOnce(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+s.kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", s.kubeletSock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.socketPath),
		ResourceName: s.cfg.ResourceName,
		Options:      s.options(),
	})
	if err != nil {
		return fmt.Errorf("register %s at %s: %w", s.cfg.ResourceName, s.kubeletSock, err)
	}
	return nil
}

// inode identifies one incarnation of a socket file; 0 when it is missing.
func inode(path string) uint64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Ino
	}
	return 0
}

func (s *Server) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{
		PreStartRequired:                s.cfg.PreStart != nil,
		GetPreferredAllocationAvailable: true,
	}
}
