package agentproto

import (
	"bytes"
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
// and never reads past the frame its prefix announces.
func FuzzReadFrame(f *testing.F) {
	f.Add(frame(helloFrame))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(append([]byte{0, 0, 0, 100}, "0123456789"...))
	f.Add(frame(`{"prepare":{"stdinData":"not base64"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		var req request
		if err := readFrame(r, &req); err == nil {
			if read := len(b) - r.Len(); read > 4+MaxFrame {
				t.Errorf("read %d bytes", read)
			}
			_, _ = req.kind()
		}
	})
}
