package agentproto

import (
	"bytes"
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

// frameChunk is how much of a frame's body is allocated ahead of the bytes
// that fill it: a peer announcing MaxFrame and sending ten bytes costs the
// reader one chunk, not the announced size.
const frameChunk = 32 << 10

// ErrTooLarge is a message that does not fit in a frame: refused by its
// sender before anything is written. It is not ErrUnavailable: the agent is
// there, the call is too big for it, and the caller says so rather than
// fall back (devplumb-direct must not get what the agent cannot take).
var ErrTooLarge = errors.New("message exceeds the maximum frame")

// request is one message from the entry point: exactly one field set.
type request struct {
	Hello     *Hello    `json:"hello,omitempty"`
	Lookahead *Prepare  `json:"lookahead,omitempty"` // not answered
	Prepare   *Prepare  `json:"prepare,omitempty"`
	Commit    *Commit   `json:"commit,omitempty"`
	Rollback  *Rollback `json:"rollback,omitempty"`
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
	if r.Lookahead != nil {
		kinds = append(kinds, "lookahead")
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
		return "", fmt.Errorf("request holds %d messages [%s], want exactly one of hello, lookahead, prepare, commit, rollback",
			len(kinds), strings.Join(kinds, " "))
	}
	return kinds[0], nil
}

// encodeFrame is v as one frame: a big-endian uint32 length, then JSON.
// A request is written by hand (encode.go), anything else with encoding/json.
func encodeFrame(v any) ([]byte, error) {
	if r, ok := v.(*request); ok {
		buf := r.appendJSON(make([]byte, 4, 512))
		if n := len(buf) - 4; n > MaxFrame {
			return nil, fmt.Errorf("%w of %d bytes (%d bytes)", ErrTooLarge, MaxFrame, n)
		}
		binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
		return buf, nil
	}
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode message: %w", err)
	}
	if len(body) > MaxFrame {
		return nil, fmt.Errorf("%w of %d bytes (%d bytes)", ErrTooLarge, MaxFrame, len(body))
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	return append(buf, body...), nil
}

// writeFrame sends vs, a frame each, in one Write, so a frame is never
// interleaved or half-sent by this side; nothing is sent when one of them
// does not encode, or when there are none.
func writeFrame[T any](w io.Writer, vs ...T) error {
	var buf []byte
	for _, v := range vs {
		b, err := encodeFrame(v)
		if err != nil {
			return err
		}
		buf = append(buf, b...)
	}
	if len(buf) == 0 {
		return nil
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("send frame: %w", err)
	}
	return nil
}

// readFrame reads one frame into v with no budget: the client's read of an
// answer. io.EOF (unwrapped) means the peer ended the connection cleanly
// between frames; anything else names what was wrong.
func readFrame(r io.Reader, v any) error {
	return (&frameReader{}).read(r, v)
}

// frameReader reads frames whose memory follows the bytes that arrive, not
// the length the peer announces.
type frameReader struct {
	// take, when set, is asked for each chunk's bytes before it is
	// allocated (the server's budget across connections); its error ends
	// the read.
	take func(n int) error
	// started, when set, is called once the length prefix arrived: the
	// server bounds the rest of the frame from then on.
	started func() error
}

func (f *frameReader) read(r io.Reader, v any) error {
	size, err := f.prefix(r)
	if err != nil {
		return err
	}
	body, err := f.body(r, size)
	if err != nil {
		return err
	}
	if r, ok := v.(*response); ok { // the entry point's read of an answer (decode.go)
		err = decodeResponse(body, r)
	} else {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		return fmt.Errorf("malformed JSON in frame of %d bytes: %w", size, err)
	}
	return nil
}

// prefix reads and checks a frame's length, calling started once its first
// byte came.
func (f *frameReader) prefix(r io.Reader) (int, error) {
	var p [4]byte
	if _, err := io.ReadFull(r, p[:1]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("read length prefix: %w", err)
	}
	if f.started != nil {
		if err := f.started(); err != nil {
			return 0, fmt.Errorf("read length prefix: %w", err)
		}
	}
	if n, err := io.ReadFull(r, p[1:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("truncated length prefix: %d of 4 bytes", 1+n)
		}
		return 0, fmt.Errorf("read length prefix: %w", err)
	}
	size := binary.BigEndian.Uint32(p[:])
	if size == 0 || size > MaxFrame {
		// Refused before reading on: the body is never allocated.
		return 0, fmt.Errorf("length prefix %d outside 1..%d bytes", size, MaxFrame)
	}
	return int(size), nil
}

// body reads size bytes chunk by chunk, each allocated only when the one
// before it is full: what a frame costs before it is complete is what
// arrived plus one chunk. A complete frame of more than one chunk is joined
// once.
func (f *frameReader) body(r io.Reader, size int) ([]byte, error) {
	var chunks [][]byte
	got := 0
	for got < size {
		n := min(frameChunk, size-got)
		if f.take != nil {
			if err := f.take(n); err != nil {
				return nil, fmt.Errorf("frame of %d bytes, %d read: %w", size, got, err)
			}
		}
		chunk := make([]byte, n)
		m, err := io.ReadFull(r, chunk)
		got += m
		chunks = append(chunks, chunk[:m])
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("truncated frame: %d of %d bytes", got, size)
		}
		if err != nil {
			return nil, fmt.Errorf("read frame of %d bytes (%d read): %w", size, got, err)
		}
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	return bytes.Join(chunks, nil), nil
}
