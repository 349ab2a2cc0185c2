package agentproto

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// bigAnswer answers every prepare with a delegate whose config list is size
// bytes: a netconf padded so its answer outgrows a frame.
type bigAnswer struct {
	*testHandler
	size int
}

func (h bigAnswer) Prepare(_ context.Context, p *Prepare) (*PrepareAnswer, error) {
	pad := bytes.Repeat([]byte("x"), h.size)
	return &PrepareAnswer{Attachment: "att", Delegate: &Delegate{
		ConfList: append(append([]byte(`{"name":"n","pad":"`), pad...), `"}`...)}}, nil
}

// An answer too large for a frame reaches the entry point as a CNI error
// saying the config is too large (code 7), on a connection that stays open:
// a closed one would send it to devplumb-direct with the same config.
func TestOversizedAnswerIsCNIError(t *testing.T) {
	s := serve(t, t.TempDir(), Server{Handler: bigAnswer{&testHandler{}, MaxFrame}})
	c := dial(t, s.path)
	a, err := c.Prepare(context.Background(), &Prepare{Command: CmdAdd, ContainerID: "c", IfName: "net1"})
	if err != nil {
		t.Fatalf("prepare: %v, want an answer", err)
	}
	if a.Error == nil || a.Error.Code != types.ErrInvalidNetworkConfig || !strings.Contains(a.Error.Msg, "too large") || a.Delegate != nil {
		t.Errorf("answer %+v, want code 7 saying the config is too large", a)
	}
	if !strings.Contains(s.log.String(), "too large for a frame") {
		t.Errorf("not logged:\n%s", s.log)
	}
}

// A request too large for a frame is refused by the client as ErrTooLarge,
// not ErrUnavailable: the entry point prints it rather than fall back.
func TestOversizedRequestIsNotUnavailable(t *testing.T) {
	s := serve(t, t.TempDir(), Server{})
	c := dial(t, s.path)
	_, err := c.Prepare(context.Background(), &Prepare{Command: CmdAdd, ContainerID: "c", IfName: "net1",
		StdinData: make([]byte, MaxFrame)})
	if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnavailable) {
		t.Errorf("prepare of a 4 MiB config: %v, want ErrTooLarge only", err)
	}
}

// Beyond MaxConns a connection is answered a refusal at once (the entry
// point falls back, ErrUnavailable); a slot freed serves again.
func TestConnectionCap(t *testing.T) {
	s := serve(t, t.TempDir(), Server{MaxConns: 2, HelloWait: time.Minute})
	var held []net.Conn
	for range 2 {
		held = append(held, rawConn(t, s.path))
	}
	start := time.Now()
	_, err := Dial(s.path, 5*time.Second, "entry-test")
	wantUnavailable(t, err, "too many connections: 2 served at once")
	if d := time.Since(start); d > 2*time.Second { // a bound on a refusal, generous for a loaded machine
		t.Errorf("refused after %v, want at once", d)
	}
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := Dial(s.path, 5*time.Second, "entry-test")
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a freed slot is not served: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Once a frame's first byte came, the rest is due within FrameWait however
// long the wait for the request to begin: a trickled frame ends the
// connection, a slow start does not.
func TestFrameWait(t *testing.T) {
	s := serve(t, t.TempDir(), Server{CommitWait: time.Minute, FrameWait: 300 * time.Millisecond})
	c := rawConn(t, s.path)
	hello(t, c)
	if _, err := c.Write([]byte{0, 0, 1}); err != nil { // the prefix, trickled
		t.Fatal(err)
	}
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var r response
	if err := readFrame(c, &r); err != nil || !strings.Contains(r.Error, "request not complete within 300ms of its first byte") {
		t.Errorf("answer %+v, %v: want the frame's wait run out", r, err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("refused after %v: the commit wait, not the frame's", d)
	}

	slow := rawConn(t, s.path)
	hello(t, slow)
	time.Sleep(600 * time.Millisecond) // twice the frame's wait before the next request begins
	if _, err := slow.Write(frame(`{"prepare":{"command":"DEL","containerID":"c","ifName":"e"}}`)); err != nil {
		t.Fatal(err)
	}
	if err := readFrame(slow, &r); err != nil || r.Prepare == nil {
		t.Errorf("a request begun after the frame's wait: %+v, %v, want it served", r, err)
	}
}

// The bytes all connections hold are bounded: frames that cannot get their
// bytes within BudgetWait are refused, "agent busy", and the others' bytes
// given back when they end serve again.
func TestInflightBudget(t *testing.T) {
	s := serve(t, t.TempDir(), Server{BudgetWait: 200 * time.Millisecond, FrameWait: time.Minute, CommitWait: time.Minute})
	answers := make(chan string, 3)
	var conns []net.Conn
	var wg sync.WaitGroup
	for range 3 { // 3 * 3.5 MiB > the 8 MiB budget
		c := rawConn(t, s.path)
		hello(t, c)
		conns = append(conns, c)
		wg.Go(func() {
			body := bytes.Repeat([]byte("x"), 7*MaxFrame/8)
			c.Write(append(binary.BigEndian.AppendUint32(nil, MaxFrame), body...)) // blocks until read or closed
		})
		go func() {
			var r response
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if readFrame(c, &r) == nil {
				answers <- r.Error
			}
		}()
	}
	select {
	case a := <-answers:
		if !strings.Contains(a, "agent busy") {
			t.Errorf("answer %q, want the budget refused", a)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no frame refused for want of budget")
	}
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	stillServes(t, s.path)
}

// One CNI call per connection: a second prepare is refused, so a connection
// leaves at most one prepared call behind.
func TestSecondPrepareRefused(t *testing.T) {
	s := serve(t, t.TempDir(), Server{})
	del := frame(`{"prepare":{"command":"DEL","containerID":"c","ifName":"e"}}`)
	last := rawExchange(t, s.path, append(append(frame(helloFrame), del...), del...), false)
	if !strings.Contains(last.Error, "second prepare on one connection") {
		t.Errorf("last answer %+v, want the second prepare refused", last)
	}
}

// rawConn is a connection closed at the end of the test.
func rawConn(t *testing.T, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hello exchanges the hello on c.
func hello(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := c.Write(frame(helloFrame)); err != nil {
		t.Fatal(err)
	}
	var r response
	if err := readFrame(c, &r); err != nil || r.Hello == nil {
		t.Fatalf("hello answered %+v, %v", r, err)
	}
}
