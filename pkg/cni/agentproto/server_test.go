package agentproto

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func frame(body string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

var helloFrame = fmt.Sprintf(`{"hello":{"protocol":%d,"build":"raw"}}`, ProtocolVersion)

// Every malformed or out-of-order request is answered with an error naming
// what was wrong, the connection is closed and logged, and the server goes
// on serving.
func TestMalformedRequests(t *testing.T) {
	s := serve(t, t.TempDir(), Server{HelloWait: 300 * time.Millisecond})
	cases := []struct {
		name      string
		send      []byte
		halfClose bool // the peer stops writing after send
		says      string
	}{
		{"malformed JSON", frame(`{"hello":`), false, "malformed JSON in frame of 9 bytes"},
		{"over the maximum", []byte{0xff, 0xff, 0xff, 0xff}, false, "length prefix 4294967295 outside 1..4194304"},
		{"empty frame", []byte{0, 0, 0, 0}, false, "length prefix 0 outside"},
		{"truncated frame", append([]byte{0, 0, 0, 100}, "0123456789"...), true, "truncated frame: 10 of 100 bytes"},
		{"truncated prefix", []byte{0, 0}, true, "truncated length prefix: 2 of 4 bytes"},
		{"two messages", frame(`{"hello":{"protocol":1},"commit":{"attachment":"a"}}`), false, "holds 2 messages [hello commit]"},
		{"no message", frame(`{}`), false, "holds 0 messages"},
		{"prepare before hello", frame(`{"prepare":{"command":"ADD"}}`), false, "prepare before hello"},
		{"second hello", append(frame(helloFrame), frame(helloFrame)...), false, "second hello"},
		{"bad command", append(frame(helloFrame), frame(`{"prepare":{"command":"VERSION","containerID":"c","ifName":"e"}}`)...), false, `command "VERSION"`},
		{"lookahead before hello", frame(`{"lookahead":{"command":"ADD","containerID":"c","ifName":"e"}}`), false, "lookahead before hello"},
		{"lookahead of a DEL", append(frame(helloFrame), frame(`{"lookahead":{"command":"DEL","containerID":"c","ifName":"e"}}`)...), false,
			"lookahead of a DEL: only an ADD's prepare is looked ahead"},
		{"second lookahead", append(frame(helloFrame), append(frame(`{"lookahead":{"command":"ADD","containerID":"c","ifName":"e"}}`),
			frame(`{"lookahead":{"command":"ADD","containerID":"c","ifName":"e"}}`)...)...), false, "lookahead after a lookahead or a prepare"},
		{"lookahead without containerID", append(frame(helloFrame), frame(`{"lookahead":{"command":"ADD","ifName":"e"}}`)...), false,
			"lookahead: prepare: containerID and ifName are required"},
		{"commit without attachment", append(frame(helloFrame), frame(`{"commit":{}}`)...), false, "attachment is required"},
		{"future protocol", frame(fmt.Sprintf(`{"hello":{"protocol":%d,"build":"ep-v9"}}`, ProtocolVersion+1)), false,
			fmt.Sprintf("protocol version %d (build ep-v9) not served: the agent (build agent-test) speaks %d", ProtocolVersion+1, ProtocolVersion)},
		{"silent", nil, false, "no request within 300ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			last := rawExchange(t, s.path, tc.send, tc.halfClose)
			if !strings.Contains(last.Error, tc.says) {
				t.Errorf("last answer %+v, want an error saying %q", last, tc.says)
			}
			if !strings.Contains(s.log.String(), strings.ReplaceAll(tc.says, `"`, `\"`)) { // as slog quotes it
				t.Errorf("log does not say %q:\n%s", tc.says, s.log)
			}
			stillServes(t, s.path)
		})
	}
	// Nothing malformed reached the handler: only stillServes' calls did.
	if prepared, committed := s.h.calls(); len(prepared) != len(cases) || len(committed) != len(cases) {
		t.Errorf("handler saw %d prepares, %d commits; want %d of each", len(prepared), len(committed), len(cases))
	}
}

// rawExchange sends b on a fresh connection and reads answers until the
// server closes it, returning the last.
func rawExchange(t *testing.T, path string, b []byte, halfClose bool) response {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		c.(*net.UnixConn).CloseWrite()
	}
	var last response
	for {
		var r response
		err := readFrame(c, &r)
		if err == io.EOF {
			return last
		}
		if err != nil {
			t.Fatalf("reading the server's answers: %v", err)
		}
		last = r
	}
}

// stillServes: a whole ADD goes through.
func stillServes(t *testing.T, path string) {
	t.Helper()
	c := dial(t, path)
	a, err := c.Prepare(context.Background(), &Prepare{Command: CmdAdd, ContainerID: "after", IfName: "net1"})
	if err != nil {
		t.Fatalf("the server no longer serves: %v", err)
	}
	if _, err := c.Commit(context.Background(), &Commit{Attachment: a.Attachment}); err != nil {
		t.Fatalf("the server no longer serves: %v", err)
	}
}
