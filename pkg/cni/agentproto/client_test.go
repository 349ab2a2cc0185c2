package agentproto

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// One connection per CNI call: hello, prepare, then commit when there is a
// delegate to run; the handler sees exactly what the entry point sent.
func TestRoundTrip(t *testing.T) {
	s := serve(t, t.TempDir(), Server{})
	for _, cmd := range []string{CmdAdd, CmdDel, CmdCheck} {
		t.Run(cmd, func(t *testing.T) {
			c := dial(t, s.path)
			if c.Agent != (Hello{Protocol: ProtocolVersion, Build: "agent-test"}) {
				t.Errorf("agent hello %+v", c.Agent)
			}
			p := Prepare{Command: cmd, ContainerID: "c-" + cmd, Netns: "/var/run/netns/x", IfName: "net1",
				Args: "K8S_POD_NAME=p;IgnoreUnknown=1", Path: "/opt/cni/bin", StdinData: []byte("not json \x00")}
			a, err := c.Prepare(context.Background(), &p)
			if err != nil {
				t.Fatal(err)
			}
			if prepared, _ := s.h.calls(); !reflect.DeepEqual(prepared[len(prepared)-1], p) {
				t.Errorf("handler got %+v, sent %+v", prepared[len(prepared)-1], p)
			}
			checkAnswer(t, c, cmd, a)
		})
	}
}

// checkAnswer checks the testHandler's answer to cmd and commits an ADD.
func checkAnswer(t *testing.T, c *Client, cmd string, a *PrepareAnswer) {
	t.Helper()
	switch cmd {
	case CmdAdd:
		if a.Delegate == nil || a.Delegate.CapabilityArgs["deviceID"] != "0000:01:00.1" || a.Attachment == "" {
			t.Fatalf("ADD answer %+v", a)
		}
		got, err := c.Commit(context.Background(), &Commit{Attachment: a.Attachment, Result: []byte(`{"cniVersion":"1.0.0"}`)})
		if err != nil || string(got.Result) != `committed:{"cniVersion":"1.0.0"}` || got.Error != nil {
			t.Errorf("commit answer %+v, %v", got, err)
		}
		failed, err := c.Commit(context.Background(), &Commit{Attachment: a.Attachment, Error: types.NewError(7, "delegate failed", "")})
		if err != nil || failed.Error == nil || failed.Error.Msg != "delegate failed" {
			t.Errorf("failed delegate's commit answer %+v, %v", failed, err)
		}
	case CmdDel:
		if !reflect.DeepEqual(*a, PrepareAnswer{}) {
			t.Errorf("DEL answer %+v, want nothing to run", a)
		}
	case CmdCheck:
		if a.Error == nil || a.Error.Code != types.ErrInvalidNetworkConfig || a.Delegate != nil {
			t.Errorf("CHECK answer %+v, want the CNI error", a)
		}
	}
}

// An agent of another protocol version is unavailable, and the error names
// both versions and builds.
func TestVersionSkew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var req request
		if readFrame(c, &req) == nil {
			writeFrame(c, &response{Hello: &Hello{Protocol: ProtocolVersion + 1, Build: "agent-v9"}, Error: "not served"})
		}
	}()
	_, err = Dial(path, 5*time.Second, "entry-v1")
	wantUnavailable(t, err, "protocol version skew", "entry-v1", "agent-v9", fmt.Sprintf("speaks %d", ProtocolVersion), fmt.Sprintf("speaks %d", ProtocolVersion+1))
}

// Each way of the agent not being there is ErrUnavailable within the bound,
// saying which way it was.
func TestDialUnavailable(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	staleSocket(t, stale)
	silent := filepath.Join(dir, "silent.sock")
	sl, err := net.Listen("unix", silent)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	go func() { // accepts and never answers
		for {
			c, err := sl.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, tc := range []struct{ name, path, says string }{
		{"no socket", filepath.Join(dir, "none.sock"), "no agent socket"},
		{"nobody listening", stale, "nobody listening"},
		{"never answers", silent, "no hello answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dial(tc.path, 100*time.Millisecond, "entry-test")
			wantUnavailable(t, err, tc.says, tc.path)
		})
	}
}

// A call the agent does not answer in time, and an agent stopping mid-call
// (a restart mid-ADD), are ErrUnavailable.
func TestCallLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(s *served, cancel context.CancelFunc)
		says string
	}{
		{"deadline", func(*served, context.CancelFunc) {}, "no prepare answer"},
		{"cancelled", func(_ *served, cancel context.CancelFunc) { cancel() }, "context canceled"},
		{"agent stops", func(s *served, _ context.CancelFunc) { go s.stop() }, "closed the connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &testHandler{block: make(chan struct{}), entered: make(chan struct{}, 1)}
			s := serve(t, t.TempDir(), Server{Handler: h})
			t.Cleanup(func() { close(h.block) }) // before the server stops: it waits for its calls
			c := dial(t, s.path)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if tc.name != "deadline" {
				ctx, cancel = context.WithCancel(context.Background())
				defer cancel()
			}
			go func() {
				<-h.entered
				tc.lose(s, cancel)
			}()
			_, err := c.Prepare(ctx, &Prepare{Command: CmdAdd, ContainerID: "c", IfName: "net1"})
			wantUnavailable(t, err, tc.says)
		})
	}
}

// Calls on many connections at once each get their own answers.
func TestConcurrentCalls(t *testing.T) {
	s := serve(t, t.TempDir(), Server{})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			c, err := Dial(s.path, 5*time.Second, "entry-test")
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			id := fmt.Sprintf("c%d", i)
			a, err := c.Prepare(context.Background(), &Prepare{Command: CmdAdd, ContainerID: id, IfName: "net1"})
			if err != nil || a.Attachment != "att-"+id {
				t.Errorf("%s: prepare answer %+v, %v", id, a, err)
				return
			}
			got, err := c.Commit(context.Background(), &Commit{Attachment: a.Attachment, Result: []byte(id)})
			if err != nil || string(got.Result) != "committed:"+id {
				t.Errorf("%s: commit answer %+v, %v", id, got, err)
			}
		})
	}
	wg.Wait()
}

// A DEL's prepare goes with the hello, one round trip less: an agent that
// reads the prepare before it answers the hello serves it (Dial, then
// Prepare, would wait for each other there); the real server answers both;
// an agent of another protocol version is unavailable as with Dial; and an
// ADD's prepare never goes with the hello.
func TestDialDelSendsThePrepareWithTheHello(t *testing.T) {
	p := &Prepare{Command: CmdDel, ContainerID: "c1", IfName: "net1", Args: "K8S_POD_NAME=p"}
	for _, agentProtocol := range []int{ProtocolVersion, ProtocolVersion + 1} {
		path := readsBothFirst(t, agentProtocol)
		c, a, err := DialDel(context.Background(), path, 5*time.Second, "entry-test", p)
		if agentProtocol != ProtocolVersion {
			wantUnavailable(t, err, "protocol version skew")
			continue
		}
		if err != nil {
			t.Fatalf("DialDel: %v", err)
		}
		c.Close()
		if !reflect.DeepEqual(*a, PrepareAnswer{}) {
			t.Errorf("answer %+v", a)
		}
	}
	s := serve(t, t.TempDir(), Server{})
	c, a, err := DialDel(context.Background(), s.path, 5*time.Second, "entry-test", p)
	if err != nil {
		t.Fatalf("DialDel to the real server: %v", err)
	}
	defer c.Close()
	if prepared, _ := s.h.calls(); len(prepared) != 1 || !reflect.DeepEqual(prepared[0], *p) {
		t.Errorf("handler got %+v, sent %+v", prepared, *p)
	}
	checkAnswer(t, c, CmdDel, a)
	if _, _, err := DialDel(context.Background(), s.path, 5*time.Second, "entry-test", &Prepare{Command: CmdAdd}); err == nil {
		t.Error("DialDel sent an ADD's prepare with the hello")
	}
	if prepared, _ := s.h.calls(); len(prepared) != 1 {
		t.Errorf("handler got %d prepares, want the DEL's alone", len(prepared))
	}
}

// readsBothFirst is an agent speaking protocol that reads a connection's
// first two requests before it answers the first (a hello), then answers a
// prepare with nothing to run; one of another protocol refuses the hello.
func readsBothFirst(t *testing.T, protocol int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var hello, prep request
		if readFrame(c, &hello) != nil || readFrame(c, &prep) != nil || hello.Hello == nil || prep.Prepare == nil {
			return
		}
		if protocol != ProtocolVersion {
			writeFrame(c, &response{Hello: &Hello{Protocol: protocol, Build: "agent-v9"}, Error: "not served"})
			return
		}
		writeFrame(c, &response{Hello: &Hello{Protocol: protocol, Build: "agent-test"}})
		writeFrame(c, &response{Prepare: &PrepareAnswer{}})
	}()
	return path
}

// lookaheadHandler is a testHandler that keeps each lookahead with its
// connection, and each prepare's connection.
type lookaheadHandler struct {
	testHandler
	looked       []Prepare
	lookConns    []*Conn
	prepareConns []*Conn
}

func (h *lookaheadHandler) Lookahead(ctx context.Context, p *Prepare) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.looked = append(h.looked, *p)
	h.lookConns = append(h.lookConns, ConnOf(ctx))
}

func (h *lookaheadHandler) Prepare(ctx context.Context, p *Prepare) (*PrepareAnswer, error) {
	h.mu.Lock()
	h.prepareConns = append(h.prepareConns, ConnOf(ctx))
	h.mu.Unlock()
	return h.testHandler.Prepare(ctx, p)
}

// DialAdd sends the ADD's prepare as a lookahead with the hello: a
// LookaheadHandler gets it, on the connection the prepare then comes on,
// before that prepare and unanswered (the prepare's answer is the
// prepare's); a handler without Lookahead serves the same calls; a
// lookahead too large for a frame is not sent (the prepare then says
// ErrTooLarge, as after Dial); and only an ADD's prepare is looked ahead.
func TestDialAddLooksAhead(t *testing.T) {
	p := &Prepare{Command: CmdAdd, ContainerID: "c1", IfName: "net1", Args: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p",
		StdinData: []byte(`{"name":"n"}`), NodeConfig: "/etc/node.json"}
	h := &lookaheadHandler{}
	s := serve(t, t.TempDir(), Server{Handler: h})
	for range 2 {
		addAfterDialAdd(t, s.path, p, "a LookaheadHandler")
	}
	h.mu.Lock()
	if len(h.looked) != 2 || !reflect.DeepEqual(h.looked[1], *p) || !reflect.DeepEqual(h.prepared[1], *p) {
		t.Errorf("lookaheads %+v, prepares %+v; want two of each, as sent", h.looked, h.prepared)
	}
	for i := range 2 {
		if h.lookConns[i] == nil || h.lookConns[i] != h.prepareConns[i] || h.lookConns[0] == h.lookConns[1] {
			t.Errorf("call %d: lookahead on connection %p, its prepare on %p", i, h.lookConns[i], h.prepareConns[i])
		}
	}
	h.mu.Unlock()

	addAfterDialAdd(t, serve(t, t.TempDir(), Server{}).path, p, "a handler without Lookahead")

	huge := *p
	huge.StdinData = make([]byte, MaxFrame)
	c, err := DialAdd(s.path, 5*time.Second, "entry-test", &huge)
	if err != nil {
		t.Fatalf("DialAdd of a config too large for a frame: %v, want the hello alone", err)
	}
	defer c.Close()
	if _, err := c.Prepare(context.Background(), &huge); !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnavailable) {
		t.Errorf("prepare of a 4 MiB config after DialAdd: %v, want ErrTooLarge only", err)
	}
	if _, err := DialAdd(s.path, 5*time.Second, "entry-test", &Prepare{Command: CmdDel}); err == nil {
		t.Error("DialAdd looked ahead at a DEL's prepare")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.looked) != 2 {
		t.Errorf("handler got %d lookaheads, want the two ADDs' that fit", len(h.looked))
	}
}

// addAfterDialAdd is one ADD as the entry point makes it to the server on path
// (serving handler): DialAdd, the prepare, and the testHandler's answer checked
// and committed.
func addAfterDialAdd(t *testing.T, path string, p *Prepare, handler string) {
	t.Helper()
	c, err := DialAdd(path, 5*time.Second, "entry-test", p)
	if err != nil {
		t.Fatalf("DialAdd to %s: %v", handler, err)
	}
	defer c.Close()
	a, err := c.Prepare(context.Background(), p)
	if err != nil {
		t.Fatalf("prepare after DialAdd to %s: %v", handler, err)
	}
	checkAnswer(t, c, CmdAdd, a)
}
