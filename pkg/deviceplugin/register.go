package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
		kubelet := statSock(s.kubeletSock)
		err := s.registerOnce(ctx)
		if err == nil {
			// The kubelet.sock we reached is the one there now, not the one
			// seen before dialling: a kubelet that restarted in between
			// replaced it, and a dead kubelet's socket accepts no connection.
			s.registered(statSock(s.kubeletSock))
			return nil
		}
		if s.heldByKubelet(err, kubelet) {
			s.registered(kubelet)
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		s.observe(EventRegisterFailed)
		// "Already connected" is no verdict on the request: the kubelet still
		// holds our previous server's connection, which it drops when it sees
		// that connection close.
		if answered(err) && !alreadyConnected(err) {
			if rejections++; rejections == rejectAttempts {
				return fmt.Errorf("device plugin %s: %w %d times: %w", s.cfg.ResourceName, ErrRegistrationRejected, rejections, err)
			}
		}
		if attempt == registerAttempts {
			s.log.Error("registration with kubelet failed; waiting for the kubelet to restart", "err", err, "hint", hint(err))
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

// alreadyConnectedMsg is kubelet 1.37's answer (devicemanager
// PluginConnected) to a registration of a socket it holds a connection to.
// The refusal also makes that kubelet forget the connection it holds, so it
// never disconnects it: a plugin must not register its socket twice with one
// kubelet while it serves that socket.
const alreadyConnectedMsg = "device plugin already connected"

func alreadyConnected(err error) bool {
	return strings.Contains(status.Convert(err).Message(), alreadyConnectedMsg)
}

// heldByKubelet: the kubelet refused as already connected, and the
// connection it holds is to the server we serve now, registered with this
// very kubelet.sock. That connection streams our devices and takes our
// allocations, so we are registered; another attempt would only be refused.
func (s *Server) heldByKubelet(err error, kubelet sockID) bool {
	if !alreadyConnected(err) || !kubelet.valid() || s.reg != (registration{kubelet, s.servedGen}) {
		return false
	}
	s.log.Warn("kubelet already holds our connection; keeping it", "err", err)
	return true
}

// hint says what an operator can do about a registration that keeps failing.
func hint(err error) string {
	if alreadyConnected(err) {
		return "the kubelet holds a connection to this socket from an earlier registration and refuses it again " +
			"(kubelet 1.37 keeps it after refusing a second registration); allocations reach this plugin through it, " +
			"device changes do not; restarting the kubelet clears it"
	}
	return "the kubelet did not take the registration; it is tried again when kubelet.sock is created"
}

func (s *Server) registered(kubelet sockID) {
	s.reg = registration{kubelet: kubelet, gen: s.servedGen}
	if s.lastKubelet.valid() && s.lastKubelet != kubelet {
		s.observe(EventKubeletRestart) // whichever event (our socket removed, kubelet.sock created) led here
	}
	s.lastKubelet = kubelet
	s.mu.Lock()
	s.regs++
	s.mu.Unlock()
	s.live.Store(true)
	s.observe(EventRegistered)
	s.log.Info("registered with kubelet", "endpoint", s.cfg.Endpoint)
	failpoint.Hit("deviceplugin-registered")
}

// registration is one registration the kubelet accepted: with which
// kubelet.sock, for which of our gRPC servers.
type registration struct {
	kubelet sockID
	gen     uint64
}

// registeredWithCurrent: the kubelet that owns kubelet.sock now accepted the
// server we serve now. Registering again would be a second registration of a
// socket that kubelet is connected to.
func (s *Server) registeredWithCurrent() bool {
	id := statSock(s.kubeletSock)
	return id.valid() && s.reg == registration{kubelet: id, gen: s.servedGen}
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

// sockID identifies one incarnation of a socket file. The inode number
// alone does not: a new kubelet.sock may get the number of the removed one.
// The change time (set when the kubelet binds it) tells them apart. The zero
// sockID is a missing file.
type sockID struct {
	dev, ino uint64
	ctime    syscall.Timespec
}

func (id sockID) valid() bool { return id != sockID{} }

func statSock(path string) sockID {
	st, err := os.Stat(path)
	if err != nil {
		return sockID{}
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sockID{dev: uint64(sys.Dev), ino: sys.Ino, ctime: sys.Ctim}
	}
	return sockID{}
}

func (s *Server) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{
		PreStartRequired:                s.cfg.PreStart != nil,
		GetPreferredAllocationAvailable: true,
	}
}
