// Package atomicfile writes files that other processes read: a reader sees the
// old content or the new one, never a partial or mixed file.
package atomicfile

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// WriteFile writes data to path atomically: a temp file in the same directory,
// fsync, chmod to perm, rename over path, fsync of the directory. Missing parent
// directories are created with mode 0755, whatever the umask. An existing file
// is replaced. Any name up to the 255-byte limit works.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, true)
}

// WriteFileVolatile is WriteFile without the fsyncs: readers still see the old content
// or the new one, never a mix, but after a power loss the file may be old, empty or
// gone. It is for state that a reboot makes void anyway (network namespaces, devices
// moved into pods and pod sandboxes do not survive one), where two fsyncs would cost
// every CNI call milliseconds and protect nothing.
func WriteFileVolatile(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, false)
}

func write(path string, data []byte, perm os.FileMode, durable bool) error {
	dir := filepath.Dir(path)
	tmp, err := createTemp(dir, filepath.Base(path))
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		// The directory is made (or the file in its way named) only when
		// the create fails: a stat of it before every write would cost
		// every CNI call a system call per record.
		if err := mkdirAll(dir); err != nil {
			return err
		}
		tmp, err = createTemp(dir, filepath.Base(path))
	}
	if err != nil {
		return fmt.Errorf("create temp file in %s: %w", dir, err)
	}
	// On any failure the temp file goes, so nothing half-written is left.
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	// createTemp makes 0600; chmod explicitly so the umask does not decide.
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if !durable && isRegular(path) {
		ok = true // tmp is path's now, or still tmp when the exchange falls back to a rename
		return exchange(tmp.Name(), path)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	ok = true
	if !durable {
		return nil
	}
	return syncDir(dir)
}

// exchange puts tmp in place of the regular file path and removes the old
// one. A rename over an existing file makes ext4 (auto_da_alloc) write the
// new file out before the rename returns: a quarter of a millisecond on
// make bench's machine for every record a CNI call rewrites, the wait a
// volatile write is for avoiding. Exchanging the two names (renameat2
// RENAME_EXCHANGE) is as atomic for readers and does not wait; a file system
// without it gets the rename.
func exchange(tmp, path string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE)
	if err != nil {
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
		}
		return nil
	}
	if err := unix.Unlink(tmp); err != nil {
		return fmt.Errorf("replaced %s, but cannot remove its old content at %s: %w", path, tmp, err)
	}
	return nil
}

// isRegular is whether path is a regular file, not following a link.
func isRegular(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// maxTempBase keeps the temp name within the 255 bytes a file name may have
// (".", ".tmp-" and a random number come on top), so any name that may be
// written may also be written atomically.
const maxTempBase = 200

// tempName is a hidden temp name for base: readers that list the directory
// skip names starting with ".".
func tempName(base string) string {
	if len(base) > maxTempBase {
		base = base[:maxTempBase]
	}
	return "." + base + ".tmp-" + strconv.FormatUint(uint64(rand.Uint32()), 10)
}

// createTemp creates a new temp file for base in dir, mode 0600. It opens
// it itself rather than with os.CreateTemp, whose *os.File first offers a
// regular file to the runtime's poller, which refuses it: four system
// calls more on every write of every CNI call.
func createTemp(dir, base string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(dir, tempName(base))
		fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "create", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
	return nil, fmt.Errorf("no free temp name for %s", base)
}

// mkdirAll creates dir and its missing parents with mode 0755 whatever the
// umask (a device plugin started with umask 077 would otherwise hide its
// files from CNI plugins running as another user); existing directories
// keep their mode.
func mkdirAll(dir string) error {
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("create directory %s: a file of that name exists", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if os.IsExist(err) {
			return nil // made by a concurrent writer
		}
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("chmod directory %s: %w", dir, err)
	}
	return nil
}

// syncDir makes the rename durable across a crash.
func syncDir(dir string) error {
	// Plain system calls: an *os.File would first offer the directory to the
	// runtime's poller, as createTemp says.
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer unix.Close(fd) //nolint:errcheck // read-only: nothing to lose
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
