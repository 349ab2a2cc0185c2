package attachment

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"golang.org/x/sys/unix"

	"github.com/devplumb/devplumb/pkg/base/atomicfile"
	"github.com/devplumb/devplumb/pkg/base/safefile"
)

// This file is the record store: one file per attachment, the lock, and
// reading and writing records. record.go decides who gets which device.

func (s *Store) attachDir() string { return filepath.Join(s.Dir, "attachments") }

// path of the record of k. Each part must pass the CNI specification's own
// check (skel applies it; this keeps a direct caller inside the dir), and
// ':', which none of them may contain, separates them, so two different
// attachments never share a file ("a-b","c" and "a","b-c" would with '-').
func (s *Store) path(k Key) (string, error) {
	checks := []struct {
		what, val string
		check     func(string) *types.Error
	}{
		{"network name", k.Network, utils.ValidateNetworkName},
		{"container ID", k.ContainerID, utils.ValidateContainerID},
		{"interface name", k.IfName, utils.ValidateInterfaceName},
	}
	for _, c := range checks {
		if err := c.check(c.val); err != nil {
			return "", fmt.Errorf("attachment %q/%q/%q: %s %q cannot be part of a state file name: %s",
				k.Network, k.ContainerID, k.IfName, c.what, c.val, err.Msg)
		}
	}
	return filepath.Join(s.attachDir(), recordName(k)), nil
}

// maxName is the longest file name the filesystems devplumb runs on take.
const maxName = 255

// recordName is the record's file name: the readable "<network>:<container
// ID>:<ifname>.json" while it fits in a file name, else "h:<sha256 of
// that>.json". The CNI specification limits none of the three in length, so
// a long container ID must still give a name: DEL must find (and remove) the
// record of any attachment ADD accepted. A hashed name has one ':', a plain
// one two, so the two kinds never meet.
func recordName(k Key) string {
	plain := k.Network + ":" + k.ContainerID + ":" + k.IfName
	if len(plain)+len(".json") <= maxName {
		return plain + ".json"
	}
	sum := sha256.Sum256([]byte(plain))
	return "h:" + hex.EncodeToString(sum[:]) + ".json"
}

// Locked runs fn while holding the store's exclusive lock. The state dir
// is checked (safefile.CheckDir) and the lock is never a link: a NAD author
// who names a stateDir someone else can write in gets an error, not writes
// in that someone's chosen place.
func (s *Store) Locked(fn func() error) error {
	if _, err := s.checkedRoot(true); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	fd, err := openLock(filepath.Join(s.Dir, "lock"))
	if err != nil {
		return err
	}
	defer unix.Close(fd) //nolint:errcheck // nothing is written through it
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lock state dir %s: %w", s.Dir, err)
	}
	defer unix.Flock(fd, unix.LOCK_UN) //nolint:errcheck // closing the file unlocks too
	return fn()
}

// checkedRoot is Dir as this store's call checked it, on first use (created
// first when create: mode 0700).
func (s *Store) checkedRoot(create bool) (safefile.Root, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != nil {
		return *s.root, nil
	}
	check := safefile.CheckRoot
	if create {
		check = func(dir string) (safefile.Root, error) { return safefile.EnsureRoot(dir, 0o700) }
	}
	r, err := check(s.Dir)
	if err != nil {
		return r, err
	}
	s.root = &r
	return r, nil
}

// Subdir is the state directory's rel, created (mode 0700) and checked as
// the store checks its own directories: for what devplumb keeps there
// besides the records (libcni's cache of the delegates' results).
func (s *Store) Subdir(rel string) (string, error) {
	root, err := s.checkedRoot(true)
	if err != nil {
		return "", fmt.Errorf("state dir: %w", err)
	}
	return root.EnsureDir(rel, 0o700)
}

// openLock opens (creating) the lock file, refusing a link or anything but
// a regular file. It returns the bare descriptor: an os.File would offer the
// file to the runtime's poller, which refuses regular files, and make it
// blocking again for Fd: three system calls more under every lock a CNI call
// takes.
func openLock(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("state lock %s: %w: it is a symbolic link", path, safefile.ErrNotRegular)
	}
	if err != nil {
		return -1, fmt.Errorf("open state lock: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd) //nolint:errcheck // refused anyway
		return -1, fmt.Errorf("state lock %s: %w (%v)", path, safefile.ErrNotRegular, err)
	}
	return fd, nil
}

// records checks the records directory (creating it if create) and
// returns it; ok is false when it does not exist (no records).
func (s *Store) records(create bool) (dir string, ok bool, err error) {
	dir = s.attachDir()
	if s.recordsOK.Load() {
		return dir, true, nil
	}
	defer func() { s.recordsOK.Store(ok) }()
	root, err := s.checkedRoot(create)
	switch {
	case err != nil:
	case create:
		_, err = root.EnsureDir("attachments", 0o700)
	default:
		_, err = root.CheckDir("attachments")
	}
	if errors.Is(err, os.ErrNotExist) {
		return dir, false, nil
	}
	if err != nil {
		return dir, false, fmt.Errorf("state: %w", err)
	}
	return dir, true, nil
}

// Get returns the record of k, or nil when there is none. Callers that
// modify state hold the lock.
func (s *Store) Get(k Key) (*Record, error) {
	return s.get(k, readRecord)
}

// getHeader is Get decoding only the record's header (recordHeader): what
// a rewrite or a removal checks the record against.
func (s *Store) getHeader(k Key) (*Record, error) {
	return s.get(k, readHeader)
}

func (s *Store) get(k Key, read func(string) (*Record, error)) (*Record, error) {
	p, err := s.path(k)
	if err != nil {
		return nil, err
	}
	if _, ok, err := s.records(false); !ok || err != nil {
		return nil, err
	}
	return read(p)
}

// maxRecordSize bounds a state record: one holds a delegate config and its
// result, a few KiB; anything near this limit was not written by devplumb.
const maxRecordSize = 4 << 20

// readRecord reads one record. It is never a link, FIFO or device when
// devplumb wrote it, so such a file is refused (as corrupt) rather than
// followed, blocked on or read without end while the state lock is held.
func readRecord(p string) (*Record, error) {
	return read(p, func(data []byte, a *Record) error { return json.Unmarshal(data, a) })
}

// readHeader reads a record as readRecord does but decodes only its header
// (recordHeader): Take sorts every record of the node by it, and reads the
// whole of the few it hands back (full).
func readHeader(p string) (*Record, error) {
	return read(p, func(data []byte, a *Record) error {
		var h recordHeader
		if err := json.Unmarshal(data, &h); err != nil {
			return err
		}
		a.Version, a.Key, a.Pod, a.ResourceName, a.DeviceID, a.NetNS = h.Version, h.Key, h.Pod, h.ResourceName, h.DeviceID, h.NetNS
		a.headerOnly = true
		return nil
	})
}

// recordHeader is what Take sorts the records by (whose attachment, pod and
// device; the netns its sandbox checks look at; the format): a third of a
// whole record's decoding, which holds a delegate config and its result.
type recordHeader struct {
	Version int `json:"version"`
	Key
	Pod          Pod    `json:"pod"`
	ResourceName string `json:"resourceName,omitempty"`
	DeviceID     string `json:"deviceID"`
	NetNS        string `json:"netns,omitempty"`
}

func read(p string, decode func([]byte, *Record) error) (*Record, error) {
	data, err := safefile.ReadFile(p, maxRecordSize, safefile.NoFollow)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state file %s is unusable (%w): remove it and run DEL again", p, err)
	}
	a := &Record{file: p}
	if err := decode(data, a); err != nil {
		if newer := newerUndecodable(p, data); newer != nil {
			return nil, newer
		}
		return nil, fmt.Errorf("state file %s is corrupt (%v): remove it and run DEL again", p, err)
	}
	return a, nil
}

// full is the whole record of a, read again if Take read only its header.
// Under the state lock the file is still the one read.
func full(a *Record) (*Record, error) {
	if !a.headerOnly {
		return a, nil
	}
	f, err := readRecord(a.file)
	if err == nil && f == nil {
		err = fmt.Errorf("state file %s removed while the state lock was held", a.file)
	}
	return f, err
}

// Put writes a record atomically, without fsync: the records describe network
// namespaces and devices in pods, none of which survive the reboot that a power loss
// is, and ADD passes over a record a crash left empty. fsync made every ADD write
// wait for the disk, twice per record.
func (s *Store) Put(a *Record) error {
	p, err := s.path(a.Key)
	if err != nil {
		return err
	}
	// Every record says its format, and never claims one this binary does
	// not write: a newer record is never rewritten (see Newer).
	if err := a.Newer(); err != nil {
		return err
	}
	a.Version = FormatVersion
	data, err := json.Marshal(a) // compact: decoded twice a call, read by devplumbctl
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if _, _, err := s.records(true); err != nil {
		return err
	}
	if err := atomicfile.WriteFileVolatile(p, data, 0o600); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// Remove deletes the record of k; a missing record is fine.
func (s *Store) Remove(k Key) error {
	p, err := s.path(k)
	if err != nil {
		return err
	}
	if _, ok, err := s.records(false); !ok || err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove state: %w", err)
	}
	return nil
}

// List returns all records, sorted by file name. Corrupt records are
// skipped and reported in the error, so one bad file does not block GC.
func (s *Store) List() ([]*Record, error) {
	out, corrupt, err := s.list()
	if err != nil {
		return nil, err
	}
	return out, corrupt
}

// list returns the readable records, the errors of corrupt ones apart, and
// err when the directory itself cannot be read.
func (s *Store) list() (out []*Record, corrupt, err error) {
	return s.listWith(readRecord)
}

// listWith is list, each record read by read.
func (s *Store) listWith(read func(string) (*Record, error)) (out []*Record, corrupt, err error) {
	if _, ok, err := s.records(false); !ok || err != nil {
		return nil, nil, err
	}
	entries, err := os.ReadDir(s.attachDir())
	if err != nil {
		return nil, nil, fmt.Errorf("list state: %w", err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var errs []error
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		a, err := read(filepath.Join(s.attachDir(), e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if a != nil {
			out = append(out, a)
		}
	}
	return out, errors.Join(errs...), nil
}

// keyOf parses a record's file name back into its key: the names are
// unambiguous, so even a record too corrupt to read can be told apart. A
// hashed name does not parse: such a corrupt record goes with its own DEL.
func keyOf(name string) (Key, bool) {
	base, ok := strings.CutSuffix(name, ".json")
	parts := strings.Split(base, ":")
	if !ok || len(parts) != 3 {
		return Key{}, false
	}
	return Key{Network: parts[0], ContainerID: parts[1], IfName: parts[2]}, true
}

// RemoveCorrupt removes, under the lock, the unreadable records of network
// that keep does not want, and returns their keys, so GC clears them too.
func (s *Store) RemoveCorrupt(network string, keep func(Key) bool) ([]Key, error) {
	var removed []Key
	err := s.Locked(func() error {
		if _, ok, err := s.records(false); !ok || err != nil {
			return err
		}
		entries, err := os.ReadDir(s.attachDir())
		if err != nil {
			return fmt.Errorf("list state: %w", err)
		}
		for _, e := range entries {
			k, ok := keyOf(e.Name())
			if !ok || k.Network != network || keep(k) {
				continue
			}
			gone, err := s.removeIfCorrupt(k)
			if err != nil {
				return err
			}
			if gone {
				removed = append(removed, k)
			}
		}
		return nil
	})
	return removed, err
}

// removeIfCorrupt removes k's record when it cannot be read.
func (s *Store) removeIfCorrupt(k Key) (bool, error) {
	p, err := s.path(k)
	if err != nil {
		return false, nil // not a name devplumb writes
	}
	if _, err := readRecord(p); err == nil || errors.Is(err, ErrNewerFormat) {
		return false, nil // readable, gone (List's business), or a newer devplumb's
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("remove state: %w", err)
	}
	return true, nil
}
