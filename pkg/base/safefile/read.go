// Package safefile is how devplumb and netdev-dp touch files and directories
// that other components can write: reads are bounded and refuse anything but
// a regular file (a FIFO would block, /dev/zero would never end), and the
// directories devplumb writes and deletes in are checked before use, so no
// link or foreign directory leads its writes elsewhere.
package safefile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Links says whether a read follows a symbolic link at the path itself.
type Links bool

const (
	// NoFollow refuses a symbolic link: for files devplumb or a device
	// plugin writes in place (state records, device-info files).
	NoFollow Links = false
	// Follow accepts one: for files an operator mounts, such as a
	// ConfigMap, whose files are links into a "..data" directory.
	Follow Links = true
)

// ErrNotRegular is matched (errors.Is) by the error for a path that is a
// link (with NoFollow), a directory, a FIFO, a socket or a device.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is matched by the error for a file over the size limit.
var ErrTooLarge = errors.New("file too large")

// ReadFile reads the regular file at path, at most limit bytes. It never
// blocks on what it finds: the open is non-blocking (a FIFO opens at once
// and is then refused), the type comes from the opened file (fstat), and the
// read stops at limit+1 bytes even if the file grows meanwhile. Every error
// names path; a missing file matches fs.ErrNotExist.
func ReadFile(path string, limit int64, links Links) ([]byte, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if links == NoFollow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	if errors.Is(err, syscall.ELOOP) && links == NoFollow {
		return nil, fmt.Errorf("%s: %w: it is a symbolic link, which is not expected here", path, ErrNotRegular)
	}
	if err != nil {
		return nil, err // *PathError: names path, keeps fs.ErrNotExist
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (it is a %s)", path, ErrNotRegular, kind(st.Mode()))
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, the limit is %d", path, ErrTooLarge, st.Size(), limit)
	}
	// Sized by the stat: one allocation, where io.ReadAll grows from 512
	// bytes (the node agent reads a few records per CNI call). A file that
	// grows meanwhile is still read to its end, up to limit+1.
	buf := bytes.NewBuffer(make([]byte, 0, st.Size()+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	data := buf.Bytes()
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: it grew beyond %d bytes while read", path, ErrTooLarge, limit)
	}
	return data, nil
}

// kind names a file type for error messages.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "file of type " + m.Type().String()
}
