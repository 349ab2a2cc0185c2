package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devplumb/devplumb/pkg/base/failpoint"
)

// ErrRegistrationRejected: the kubelet answered the registration with an
// error (unsupported API version, invalid resource name, or it could not
// reach the plugin's socket) every time it was asked. Run returns it.
var ErrRegistrationRejected = errors.New("kubelet rejected the registration")

const (
	// registerAttempts bounds the retries of one registration when the
	// kubelet does not answer: kubelet.sock can exist a moment before the
	// kubelet accepts connections on it. After them the plugin waits for the
	// next kubelet restart.
	registerAttempts = 8
	// rejectAttempts bounds the retries when the kubelet answers with an
	// error: its dial back to our socket can fail once during a restart, a
	// bad version or resource name never passes.
	rejectAttempts = 3
	// registerTimeout bounds one Register call; the kubelet itself may take
	// up to 10 s to dial the plugin back.
	registerTimeout = 15 * time.Second
)

// registerIfKubelet registers when kubelet.sock exists; otherwise its
// creation event will.
func (s *Server) registerIfKubelet(ctx context.Context) error {
	if _, err := os.Stat(s.kubeletSock); err != nil {
		s.log.Info("kubelet.sock not there yet; waiting for it", "path", s.kubeletSock)
		return nil
	}
	return s.register(ctx)
}

// register calls Registration.Register, retrying briefly with backoff. It
// returns an error only when the kubelet keeps rejecting the registration.
func (s *Server) register(ctx context.Context) error {
	delay := 50 * time.Millisecond
	rejections := 0
	for attempt := 1; ; attempt++ {
		// A kubelet that restarted meanwhile removed our socket: registering
		// it would be refused. Its Remove event is queued and leads to a
		// fresh socket and registration.
		if _, err := os.Stat(s.socketPath); err != nil {
			s.log.Info("plugin socket gone; registering after it is served again")
			return nil
		}
		ino := inode(s.kubeletSock)
		err := s.registerOnce(ctx)
		if err == nil {
			s.registered(ino)
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		s.observe(EventRegisterFailed)
		if answered(err) {
			if rejections++; rejections == rejectAttempts {
				return fmt.Errorf("device plugin %s: %w %d times: %w", s.cfg.ResourceName, ErrRegistrationRejected, rejections, err)
			}
		}
		if attempt == registerAttempts {
			s.log.Error("registration with kubelet failed; waiting for the kubelet to restart", "err", err)
			return nil
		}
		s.log.Warn("registration with kubelet failed; retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay *= 2
	}
}

func (s *Server) registered(ino uint64) {
	s.registeredIno = ino
	s.mu.Lock()
	s.regs++
	s.mu.Unlock()
	s.live.Store(true)
	s.observe(EventRegistered)
	s.log.Info("registered with kubelet", "endpoint", s.cfg.Endpoint)
	failpoint.Hit("deviceplugin-registered")
}

// answered tells a kubelet's error answer from a kubelet that is not there
// or did not answer in time.
func answered(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

func (s *Server) registerOnce(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+s.kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return status.Errorf(codes.Unavailable, "connect to %s: %v", s.kubeletSock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
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
