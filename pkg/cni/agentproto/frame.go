package agentproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxFrame bounds one message. A network config, a delegate list and a CNI
// result together are kilobytes; the bound keeps a bad peer from making the
// other side allocate at will.
const MaxFrame = 4 << 20

// request is one message from the entry point: exactly one field set.
type request struct {
	Hello    *Hello    `json:"hello,omitempty"`
	Prepare  *Prepare  `json:"prepare,omitempty"`
	Commit   *Commit   `json:"commit,omitempty"`
	Rollback *Rollback `json:"rollback,omitempty"`
}

// response answers a request with the matching field, or with Error when the
// agent could not serve it (refused peer, malformed request, handler failure).
// A version mismatch answers both Hello and Error, so the entry point can name
// the agent's version.
type response struct {
	Hello    *Hello          `json:"hello,omitempty"`
	Prepare  *PrepareAnswer  `json:"prepare,omitempty"`
	Commit   *CommitAnswer   `json:"commit,omitempty"`
	Rollback *RollbackAnswer `json:"rollback,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// kind names the one message a request holds.
func (r *request) kind() (string, error) {
	var kinds []string
	if r.Hello != nil {
		kinds = append(kinds, "hello")
	}
	if r.Prepare != nil {
		kinds = append(kinds, "prepare")
	}
	if r.Commit != nil {
		kinds = append(kinds, "commit")
	}
	if r.Rollback != nil {
		kinds = append(kinds, "rollback")
	}
	if len(kinds) != 1 {
		return "", fmt.Errorf("request holds %d messages [%s], want exactly one of hello, prepare, commit, rollback",
			len(kinds), strings.Join(kinds, " "))
	}
	return kinds[0], nil
}

// writeFrame sends v as one frame: a big-endian uint32 length, then JSON.
// One Write, so a frame is never interleaved or half-sent by this side.
func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	if len(body) > MaxFrame {
		return fmt.Errorf("message of %d bytes exceeds the maximum frame of %d bytes", len(body), MaxFrame)
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	if _, err := w.Write(append(buf, body...)); err != nil {
		return fmt.Errorf("send frame: %w", err)
	}
	return nil
}

// readFrame reads one frame into v. io.EOF (unwrapped) means the peer ended
// the connection cleanly between frames; anything else names what was wrong.
func readFrame(r io.Reader, v any) error {
	var prefix [4]byte
	if n, err := io.ReadFull(r, prefix[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("truncated length prefix: %d of 4 bytes", n)
		}
		return fmt.Errorf("read length prefix: %w", err)
	}
	size := binary.BigEndian.Uint32(prefix[:])
	if size == 0 || size > MaxFrame {
		// Refused before reading on: the body is never allocated.
		return fmt.Errorf("length prefix %d outside 1..%d bytes", size, MaxFrame)
	}
	body := make([]byte, size)
	if n, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("truncated frame: %d of %d bytes", n, size)
		}
		return fmt.Errorf("read frame of %d bytes: %w", size, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("malformed JSON in frame of %d bytes: %w", size, err)
	}
	return nil
}
