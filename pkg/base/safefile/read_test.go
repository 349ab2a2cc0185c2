package safefile

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readOrHang runs ReadFile and fails the test if it does not return: a read
// that blocks on a FIFO or never ends on /dev/zero is the bug this guards.
func readOrHang(t *testing.T, path string, limit int64, links Links) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type out struct {
		data []byte
		err  error
	}
	done := make(chan out, 1)
	go func() {
		d, err := ReadFile(path, limit, links)
		done <- out{d, err}
	}()
	select {
	case o := <-done:
		return o.data, o.err
	case <-ctx.Done():
		t.Fatalf("ReadFile(%s) did not return", path)
		return nil, nil
	}
}

// Every kind of file that is not a small regular one is refused, without
// blocking, with an error naming the path; both link modes.
func TestReadFileRefusesHostileFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 101), 0o600); err != nil {
		t.Fatal(err)
	}
	link := func(name, target string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, path string
		want       error
	}{
		{"fifo", fifo, ErrNotRegular},
		{"link to fifo", link("lfifo", fifo), ErrNotRegular},
		{"dev zero", "/dev/zero", ErrNotRegular},
		{"link to dev zero", link("lzero", "/dev/zero"), ErrNotRegular},
		{"link to dev urandom", link("lrandom", "/dev/urandom"), ErrNotRegular},
		{"directory", dir, ErrNotRegular},
		{"too large", big, ErrTooLarge},
		{"link to too large", link("lbig", big), ErrTooLarge},
		{"missing", filepath.Join(dir, "nope"), fs.ErrNotExist},
	}
	for _, tc := range cases {
		for _, links := range []Links{NoFollow, Follow} {
			_, err := readOrHang(t, tc.path, 100, links)
			if err == nil || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("%s (follow %v): error %v does not name %s", tc.name, links, err, tc.path)
			}
			isLink := strings.HasPrefix(filepath.Base(tc.path), "l")
			if !errors.Is(err, tc.want) && !(isLink && links == NoFollow && errors.Is(err, ErrNotRegular)) {
				t.Errorf("%s (follow %v): error %v, want %v", tc.name, links, err, tc.want)
			}
		}
	}
}

// A regular file within the limit is read whole; through a link only with
// Follow.
func TestReadFileRegular(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := filepath.Join(dir, "l")
	if err := os.Symlink(p, l); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path  string
		links Links
		ok    bool
	}{{p, NoFollow, true}, {p, Follow, true}, {l, Follow, true}, {l, NoFollow, false}} {
		data, err := readOrHang(t, tc.path, 5, tc.links)
		if tc.ok != (err == nil) || (tc.ok && string(data) != "hello") {
			t.Errorf("%s follow %v: %q %v", tc.path, tc.links, data, err)
		}
	}
}

// A file longer than its stat says (procfs gives size 0, as a file growing
// after the stat does) is read to its end, and refused once it passes the
// limit.
func TestReadFileLongerThanItsStat(t *testing.T) {
	data, err := ReadFile("/proc/self/status", 1<<20, NoFollow)
	if err != nil || len(data) <= 512 || !strings.HasPrefix(string(data), "Name:") {
		t.Fatalf("/proc/self/status: %d bytes, %v; want it whole (more than 512 bytes)", len(data), err)
	}
	if _, err := ReadFile("/proc/self/status", 100, NoFollow); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "grew") {
		t.Errorf("/proc/self/status with a 100-byte limit: %v, want ErrTooLarge (grew beyond)", err)
	}
}
