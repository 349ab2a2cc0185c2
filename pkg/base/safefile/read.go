// Package safefile is how devplumb and netdev-dp touch files and directories
// that other components can write: reads are bounded and refuse anything but
// a regular file (a FIFO would block, /dev/zero would never end), and the
// directories devplumb writes and deletes in are checked before use, so no
// link or foreign directory leads its writes elsewhere.
package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"golang.org/x/sys/unix"
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
// names path; a missing file matches fs.ErrNotExist. It makes the system
// calls alone (open, fstat, read to the end, close), without an os.File's
// registration with the poller, which a regular file refuses: the node
// agent reads every state record of the node for each ADD.
func ReadFile(path string, limit int64, links Links) ([]byte, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC
	if links == NoFollow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := retry(func() (int, error) { return unix.Open(path, flags, 0) })
	if errors.Is(err, unix.ELOOP) && links == NoFollow {
		return nil, fmt.Errorf("%s: %w: it is a symbolic link, which is not expected here", path, ErrNotRegular)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err} // keeps fs.ErrNotExist
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: %w (it is a %s)", path, ErrNotRegular, kindOf(st.Mode))
	}
	if st.Size > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, the limit is %d", path, ErrTooLarge, st.Size, limit)
	}
	return readAll(fd, path, st.Size, limit)
}

// readAll reads fd to its end into a buffer sized by the stat (one
// allocation, one read and the read that finds the end when the file did
// not change); a file that grows meanwhile is read on, up to limit+1 bytes.
func readAll(fd int, path string, size, limit int64) ([]byte, error) {
	buf := make([]byte, 0, size+512)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(int64(cap(buf)), limit+1-int64(len(buf)))))
		}
		n, err := retry(func() (int, error) { return unix.Read(fd, buf[len(buf):cap(buf)]) })
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("%s: %w: it grew beyond %d bytes while read", path, ErrTooLarge, limit)
		}
	}
}

// retry makes a system call again when a signal interrupted it.
func retry(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != unix.EINTR {
			return n, err
		}
	}
}

// kindOf names the file type of a stat's mode for error messages.
func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return kind(fs.ModeDir)
	case unix.S_IFIFO:
		return kind(fs.ModeNamedPipe)
	case unix.S_IFSOCK:
		return kind(fs.ModeSocket)
	case unix.S_IFCHR:
		return kind(fs.ModeDevice | fs.ModeCharDevice)
	case unix.S_IFBLK:
		return kind(fs.ModeDevice)
	case unix.S_IFLNK:
		return kind(fs.ModeSymlink)
	}
	return fmt.Sprintf("file of type %#o", mode&unix.S_IFMT)
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
