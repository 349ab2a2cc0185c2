package agentproto

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
)

// A message over the maximum is refused by its sender, which writes nothing:
// the peer never sees a frame it would refuse.
func TestWriteFrameOverMaximum(t *testing.T) {
	var out bytes.Buffer
	err := writeFrame(&out, &request{Prepare: &Prepare{StdinData: make([]byte, MaxFrame)}})
	if err == nil || !strings.Contains(err.Error(), "exceeds the maximum frame of 4194304 bytes") {
		t.Errorf("writeFrame = %v, want the size refused", err)
	}
	if out.Len() != 0 {
		t.Errorf("%d bytes written", out.Len())
	}
}

// A frame is read back as written, and a second frame after it is not
// consumed by the first read.
func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := request{Commit: &Commit{Attachment: "a", Result: []byte("r")}}
	for range 2 {
		if err := writeFrame(&buf, &in); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		var got request
		if err := readFrame(&buf, &got); err != nil || got.Commit == nil || string(got.Commit.Result) != "r" {
			t.Fatalf("read %+v, %v", got, err)
		}
	}
}

// Whatever arrives, readFrame returns a message or an error, never panics,
// never reads past the frame its prefix announces, and allocates for a frame
// not what its prefix announces but what arrived, plus one chunk: a peer
// announcing 4 MiB and sending ten bytes costs the reader kilobytes.
func FuzzReadFrame(f *testing.F) {
	f.Add(frame(helloFrame))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(append([]byte{0, 0, 0, 100}, "0123456789"...))
	f.Add(append([]byte{0, 0x3f, 0xff, 0xf0}, "0123456789"...)) // almost MaxFrame announced, 10 bytes sent
	f.Add(append([]byte{0, 0x40, 0, 0}, bytes.Repeat([]byte("x"), 3*frameChunk+7)...))
	f.Add(frame(`{"prepare":{"stdinData":"not base64"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		var req request
		var err error
		alloc := allocated(func() { err = readFrame(r, &req) })
		if err == nil {
			if read := len(b) - r.Len(); read > 4+MaxFrame {
				t.Errorf("read %d bytes", read)
			}
			_, _ = req.kind()
		}
		if len(b) < 4 {
			return
		}
		// A frame that came whole is decoded too: the JSON's values are
		// allocated, a small multiple of its bytes.
		bound := uint64(len(b)) + frameChunk + 4<<10
		if announced := binary.BigEndian.Uint32(b); uint64(len(b)-4) >= uint64(announced) {
			bound = 8*uint64(len(b)) + frameChunk + 4<<10
		}
		if alloc > bound {
			t.Errorf("reading %d bytes announcing %d allocated %d bytes, more than %d", len(b), binary.BigEndian.Uint32(b), alloc, bound)
		}
	})
}

// allocated is the bytes fn allocates on the heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
