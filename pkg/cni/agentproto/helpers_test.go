package agentproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// peerEnv makes the test binary a client instead: run as another user by
// TestNonRootPeerRefused, it dials the socket the variable names and prints
// what it got.
const peerEnv = "AGENTPROTO_TEST_PEER_SOCKET"

func TestMain(m *testing.M) {
	if path := os.Getenv(impostorEnv); path != "" {
		os.Exit(impostor(path))
	}
	if path := os.Getenv(peerEnv); path != "" {
		c, err := Dial(path, 5*time.Second, "peer-test")
		if err == nil {
			c.Close()
		}
		fmt.Printf("unavailable=%v err=%v\n", errors.Is(err, ErrUnavailable), err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testHandler answers by command: ADD a delegate to run, DEL nothing to
// run, CHECK a CNI error; Commit echoes the result or the error. With block
// set, Prepare waits for it to close, whatever its context says, as a stuck
// agent would.
type testHandler struct {
	mu         sync.Mutex
	prepared   []Prepare
	committed  []Commit
	rolledBack []Rollback
	block      chan struct{}
	entered    chan struct{} // told when Prepare starts waiting for block
}

func (h *testHandler) Build() string { return "agent-test" }

func (h *testHandler) Prepare(_ context.Context, p *Prepare) (*PrepareAnswer, error) {
	h.mu.Lock()
	h.prepared = append(h.prepared, *p)
	h.mu.Unlock()
	if h.block != nil {
		h.entered <- struct{}{}
		<-h.block
		return nil, errors.New("blocked")
	}
	switch p.Command {
	case CmdAdd:
		return &PrepareAnswer{Attachment: "att-" + p.ContainerID, Delegate: &Delegate{
			ConfList:       []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"}]}`),
			CapabilityArgs: map[string]any{"deviceID": "0000:01:00.1", "CNIDeviceInfoFile": "/x/cni/f"},
		}}, nil
	case CmdDel:
		return &PrepareAnswer{}, nil
	}
	return &PrepareAnswer{Error: types.NewError(types.ErrInvalidNetworkConfig, "bad config", "CHECK")}, nil
}

func (h *testHandler) Commit(_ context.Context, c *Commit) (*CommitAnswer, error) {
	h.mu.Lock()
	h.committed = append(h.committed, *c)
	h.mu.Unlock()
	if c.Error != nil {
		return &CommitAnswer{Error: c.Error}, nil
	}
	if string(c.Result) == "undo" { // as a commit failing after the delegates ran
		return &CommitAnswer{Error: types.NewError(106, "network-status refused", ""), Undo: true}, nil
	}
	if string(c.Result) == "bad undo" {
		return &CommitAnswer{Undo: true}, nil
	}
	return &CommitAnswer{Result: append([]byte("committed:"), c.Result...)}, nil
}

func (h *testHandler) Rollback(_ context.Context, r *Rollback) (*RollbackAnswer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rolledBack = append(h.rolledBack, *r)
	return &RollbackAnswer{}, nil
}

func (h *testHandler) calls() ([]Prepare, []Commit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.prepared, h.committed
}

// staleSocket leaves a socket file at path that nobody listens on, as a
// dead agent does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

// syncBuffer is a log destination the server's goroutines share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// served is a running server on a socket in dir.
type served struct {
	path string
	h    *testHandler
	log  *syncBuffer
	stop func() // stops the server and waits for Serve to return
}

// serve starts srv (its Log, and a testHandler when it has none, filled in) on dir/run/agent.sock and
// stops it at the end of the test.
func serve(t *testing.T, dir string, srv Server) *served {
	t.Helper()
	s := &served{path: filepath.Join(dir, "run", "agent.sock"), h: &testHandler{}, log: &syncBuffer{}}
	if h, ok := srv.Handler.(*testHandler); ok {
		s.h = h
	}
	if srv.Handler == nil {
		srv.Handler = s.h
	}
	srv.Log = slog.New(slog.NewTextHandler(s.log, nil))
	l, err := Listen(s.path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(s.stop)
	return s
}

// dial connects with a generous bound: these tests are about answers, not time.
func dial(t *testing.T, path string) *Client {
	t.Helper()
	c, err := Dial(path, 5*time.Second, "entry-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantUnavailable checks err is ErrUnavailable and says what it must.
func wantUnavailable(t *testing.T, err error, says ...string) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v, want ErrUnavailable", err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}
