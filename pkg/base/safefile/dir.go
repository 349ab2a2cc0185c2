package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUnsafeDir is matched (errors.Is) by CheckDir's and EnsureDir's errors.
var ErrUnsafeDir = errors.New("unsafe directory")

// CheckDir makes sure that what devplumb writes or deletes in dir stays in
// dir: dir is a directory and not a symbolic link, and neither it nor any
// directory above it can be changed by anyone but root (or the user running
// this process), so no one else can swap a part of the path for a link
// between this check and the use. A directory above may be writable by
// others only with the sticky bit (/tmp): there, others cannot rename or
// remove root's entries. A link above dir (/var/run -> /run) is followed
// when it belongs to root. dir must be absolute; a missing dir matches
// fs.ErrNotExist.
func CheckDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("directory %q: %w: not an absolute path", dir, ErrUnsafeDir)
	}
	dir = filepath.Clean(dir)
	prefix := "/"
	for _, part := range append([]string{""}, strings.Split(dir, "/")[1:]...) {
		prefix = filepath.Join(prefix, part)
		if err := checkComponent(dir, prefix, prefix == dir); err != nil {
			return err
		}
	}
	return nil
}

// checkComponent checks one directory on the way to dir (last: dir itself).
// It stats into a Stat_t of its own: every ADD and DEL checks a dozen
// directories, and an os.FileInfo is an allocation each.
func checkComponent(dir, path string, last bool) error {
	var st unix.Stat_t
	if err := statRetry(unix.Lstat, path, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: path, Err: err} // keeps fs.ErrNotExist
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if last {
			return fmt.Errorf("directory %s: %w: it is a symbolic link", dir, ErrUnsafeDir)
		}
		if !trustedUID(st.Uid) {
			return fmt.Errorf("directory %s: %w: %s is a symbolic link of uid %d", dir, ErrUnsafeDir, path, st.Uid)
		}
		// Only a link's target needs a second look (a call per path
		// component adds up: every ADD and DEL checks its directories).
		if err := statRetry(unix.Stat, path, &st); err != nil {
			return &fs.PathError{Op: "stat", Path: path, Err: err}
		}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("directory %s: %w: %s is not a directory", dir, ErrUnsafeDir, path)
	case !trustedUID(st.Uid):
		return fmt.Errorf("directory %s: %w: %s belongs to uid %d, not root", dir, ErrUnsafeDir, path, st.Uid)
	case st.Mode&0o022 != 0 && (last || st.Mode&unix.S_ISVTX == 0):
		return fmt.Errorf("directory %s: %w: %s is writable by group or others (mode %v)", dir, ErrUnsafeDir, path, dirMode(st.Mode))
	}
	return nil
}

// statRetry is stat (unix.Lstat or unix.Stat) of path, again when a signal
// interrupted it.
func statRetry(stat func(string, *unix.Stat_t) error, path string, st *unix.Stat_t) error {
	for {
		if err := stat(path, st); err != unix.EINTR {
			return err
		}
	}
}

// dirMode is a directory's mode bits as fs.FileMode prints them.
func dirMode(m uint32) fs.FileMode {
	mode := fs.ModeDir | fs.FileMode(m&0o777)
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// CheckDirUnder checks root with CheckDir and then each directory of rel
// below it as CheckDir checks its last one: below a root devplumb owns, no
// directory may be a link, even root's own. It returns root/rel.
func CheckDirUnder(root, rel string) (string, error) {
	r, err := CheckRoot(root)
	if err != nil {
		return "", err
	}
	return r.CheckDir(rel)
}

// EnsureDirUnder is CheckDirUnder, creating what is missing (mode perm).
func EnsureDirUnder(root, rel string, perm os.FileMode) (string, error) {
	r, err := EnsureRoot(root, perm)
	if err != nil {
		return "", err
	}
	return r.EnsureDir(rel, perm)
}

// Root is a directory that passed CheckDir (or EnsureDir): the directories
// of one call below it are checked without checking it again, each check
// statting every directory from "/". A Root serves one call, as the check
// itself does: a directory that passed stays as checked until root changes
// it, and a new call checks afresh.
type Root struct{ dir string }

// CheckRoot is dir as a Root, once it passes CheckDir.
func CheckRoot(dir string) (Root, error) {
	if err := CheckDir(dir); err != nil {
		return Root{}, err
	}
	return Root{dir: filepath.Clean(dir)}, nil
}

// EnsureRoot is dir as a Root, once it passes EnsureDir (mode perm).
func EnsureRoot(dir string, perm os.FileMode) (Root, error) {
	if err := EnsureDir(dir, perm); err != nil {
		return Root{}, err
	}
	return Root{dir: filepath.Clean(dir)}, nil
}

// Dir is the root's path.
func (r Root) Dir() string { return r.dir }

// CheckDir checks each directory of rel below the root as CheckDirUnder
// does, and returns root/rel.
func (r Root) CheckDir(rel string) (string, error) { return r.below(rel, 0, false) }

// EnsureDir is CheckDir, creating what is missing (mode perm).
func (r Root) EnsureDir(rel string, perm os.FileMode) (string, error) {
	return r.below(rel, perm, true)
}

func (r Root) below(rel string, perm os.FileMode, create bool) (string, error) {
	if r.dir == "" {
		return "", fmt.Errorf("directory %s: %w: below no checked root", rel, ErrUnsafeDir)
	}
	dir := filepath.Join(r.dir, rel)
	if !strings.HasPrefix(dir, r.dir+"/") {
		return "", fmt.Errorf("directory %s: %w: not below %s", dir, ErrUnsafeDir, r.dir)
	}
	path := r.dir
	for _, part := range strings.Split(filepath.Clean(rel), "/") {
		path = filepath.Join(path, part)
		err := checkComponent(dir, path, true)
		if create && errors.Is(err, fs.ErrNotExist) {
			err = mkdir(path, perm)
		}
		if err != nil {
			return "", err
		}
	}
	return dir, nil
}

// mkdir makes one directory, mode perm whatever the umask, then checks it.
func mkdir(path string, perm os.FileMode) error {
	if err := os.Mkdir(path, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory %s: %w", path, err)
	}
	if err := os.Chmod(path, perm); err != nil {
		return fmt.Errorf("chmod directory %s: %w", path, err)
	}
	return checkComponent(path, path, true)
}

// EnsureDir creates dir if it is missing (missing parents too, mode perm
// whatever the umask), then checks it with CheckDir.
func EnsureDir(dir string, perm os.FileMode) error {
	err := CheckDir(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	// MkdirAll applies the umask; the mode of a directory others read
	// (device-info) must not depend on it.
	if err := os.Chmod(dir, perm); err != nil {
		return fmt.Errorf("chmod directory %s: %w", dir, err)
	}
	return CheckDir(dir)
}

func trustedOwner(st fs.FileInfo) bool {
	u := uid(st)
	return u >= 0 && trustedUID(uint32(u))
}

// trustedUID is root, or the user running this process.
func trustedUID(u uint32) bool { return u == 0 || int(u) == os.Geteuid() }

func uid(st fs.FileInfo) int {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid)
	}
	return -1
}

// CheckOwnedFile makes sure that what devplumb takes from the file (or
// socket) at path comes from root: its directory passes CheckDir, and the
// file belongs to root (or this process's user) and, unless a socket, is not
// writable by group or others. A NAD names such paths (the kubelet's socket,
// a kubeconfig); one of its author's making must not be trusted.
func CheckOwnedFile(path string) error {
	if err := CheckDir(filepath.Dir(path)); err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	switch {
	case !trustedOwner(st):
		return fmt.Errorf("%s: %w: it belongs to uid %d, not root", path, ErrUnsafeDir, uid(st))
	case st.Mode()&fs.ModeSocket == 0 && st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s: %w: it is writable by group or others (mode %v)", path, ErrUnsafeDir, st.Mode())
	}
	return nil
}
