package devinfo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/devplumb/devplumb/pkg/base/atomicfile"
	"github.com/devplumb/devplumb/pkg/base/safefile"
)

// DefaultDir is the spec's device-info directory, holding dp/ and cni/.
const DefaultDir = "/var/run/k8s.cni.cncf.io/devinfo"

// The two subdirectories of spec section 4, also the Kind of a File.
const (
	KindDP  = "dp"
	KindCNI = "cni"
)

// ErrNotFound is matched (errors.Is) by the error of a read of a missing file;
// so is fs.ErrNotExist.
var ErrNotFound = errors.New("device-info file not found")

type notFoundError struct{ path string }

func (e *notFoundError) Error() string { return "device-info file " + e.path + " not found" }
func (e *notFoundError) Is(target error) bool {
	return target == ErrNotFound || target == fs.ErrNotExist
}

// Store is a device-info directory: Dir/dp and Dir/cni.
type Store struct {
	Dir string
}

// NewStore returns the store rooted at dir, or at DefaultDir when dir is "".
func NewStore(dir string) *Store {
	if dir == "" {
		dir = DefaultDir
	}
	return &Store{Dir: dir}
}

// DPPath is the device plugin's file for a device of a resource:
// Dir/dp/<resourceName, "/" replaced by "-">-<deviceID>-device.json, the name
// the NAD client and the SR-IOV device plugin use. An empty name or part, ".",
// "..", NUL, or a "/" in deviceID (which the NAD client would turn into "-",
// making two devices share a file) is refused, as is a name over 255 bytes.
func (s *Store) DPPath(resourceName, deviceID string) (string, error) {
	if err := checkResourceName(resourceName); err != nil {
		return "", err
	}
	if err := checkName("device ID", deviceID); err != nil {
		return "", err
	}
	name := strings.ReplaceAll(resourceName, "/", "-") + "-" + deviceID + "-device.json"
	return s.join(KindDP, name)
}

// CNIPath is the path of a CNI device-info file named fileName ("/" replaced by
// "-", as the NAD client does) under Dir/cni.
func (s *Store) CNIPath(fileName string) (string, error) {
	name := strings.ReplaceAll(fileName, "/", "-")
	if err := checkName("CNI device-info file name", name); err != nil {
		return "", err
	}
	return s.join(KindCNI, name)
}

// CNIFileName is the unique file name of a network attachment's CNI
// device-info file, as Multus builds it: "<network>-<containerID>_<ifName>".
// It is derived from what DEL receives, so DEL finds the file without state.
// A name longer than a file name may be (the CNI specification limits
// neither network names nor container IDs) keeps its first 180 bytes and
// ends in a hash of the whole, so it stays unique and DEL rebuilds it.
func CNIFileName(network, containerID, ifName string) string {
	name := network + "-" + containerID + "_" + ifName
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:180] + "-" + hex.EncodeToString(sum[:])
}

// maxName is the longest file name the filesystems in use take.
const maxName = 255

func (s *Store) join(kind, name string) (string, error) {
	if len(name) > maxName {
		return "", fmt.Errorf("device-info file name %.40q... is %d bytes long, the limit is %d", name, len(name), maxName)
	}
	return filepath.Join(s.Dir, kind, name), nil
}

// checkResourceName accepts "domain/name" style names whose parts are plain
// names: no empty, "." or ".." part and no NUL.
func checkResourceName(res string) error {
	if res == "" {
		return errors.New("resource name is empty")
	}
	for _, part := range strings.Split(res, "/") {
		if err := checkName("resource name "+quote(res)+" part", part); err != nil {
			return err
		}
	}
	return nil
}

// checkName refuses anything that is not a single plain file name component.
func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case s == "." || s == "..":
		return fmt.Errorf("%s %q would leave the device-info directory", what, s)
	case strings.ContainsRune(s, '/'):
		return fmt.Errorf("%s %q contains \"/\"", what, s)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("%s %q contains a NUL byte", what, s)
	}
	return nil
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// WriteDP validates info and writes it as the device plugin file of a device,
// atomically, mode 0644, replacing an older one. The file says version 1.1.0
// whatever info.Version is (empty is fine).
func (s *Store) WriteDP(resourceName, deviceID string, info *DeviceInfo) error {
	path, err := s.DPPath(resourceName, deviceID)
	if err != nil {
		return err
	}
	if info == nil {
		return fmt.Errorf("device %s of %s: device-info missing (nil)", deviceID, resourceName)
	}
	// The version is this package's to set: a caller need not, and a file
	// written now is 1.1.0 whatever an older one read in said.
	out := *info
	out.Version = Version
	if err := Validate(&out); err != nil {
		return fmt.Errorf("device %s of %s: %w", deviceID, resourceName, err)
	}
	data, err := json.MarshalIndent(&out, "", "  ")
	if err != nil {
		return fmt.Errorf("encode device-info for %s: %w", path, err)
	}
	return writeFile(path, append(data, '\n'))
}

// ReadDP reads and validates the device plugin file of a device.
func (s *Store) ReadDP(resourceName, deviceID string) (*DeviceInfo, error) {
	_, info, _, err := s.readDP(resourceName, deviceID)
	return info, err
}

// readDP reads a device plugin file from a checked dp/ directory: a NAD
// names deviceInfoDir, and one in a directory its author controls must not
// feed devplumb device-info files of the author's making. It returns the
// checked root too.
func (s *Store) readDP(resourceName, deviceID string) ([]byte, *DeviceInfo, safefile.Root, error) {
	path, err := s.DPPath(resourceName, deviceID)
	if err != nil {
		return nil, nil, safefile.Root{}, err
	}
	root, err := safefile.CheckRoot(s.Dir)
	if err == nil {
		_, err = root.CheckDir(KindDP)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, root, &notFoundError{path: path}
	}
	if err != nil {
		return nil, nil, root, fmt.Errorf("device-info directory: %w", err)
	}
	data, info, err := readFile(path)
	return data, info, root, err
}

// RemoveDP removes the device plugin file of a device; a missing file is fine.
func (s *Store) RemoveDP(resourceName, deviceID string) error {
	path, err := s.DPPath(resourceName, deviceID)
	if err != nil {
		return err
	}
	return RemoveFile(path)
}

// CopyDPToCNI validates the device plugin file of a device and copies it to
// cniPath atomically, byte for byte, so keys this package does not know
// survive. It returns what it copied, and ErrNotFound when the device plugin
// wrote no file.
func (s *Store) CopyDPToCNI(resourceName, deviceID, cniPath string) (*DeviceInfo, []byte, error) {
	data, info, root, err := s.readDP(resourceName, deviceID)
	if err != nil {
		return nil, nil, err
	}
	if err := writeCNI(root, cniPath, data); err != nil {
		src, _ := s.DPPath(resourceName, deviceID)
		return nil, nil, fmt.Errorf("copy device-info %s to %s: %w", src, cniPath, err)
	}
	return info, data, nil
}

// writeCNI is writeFile for a CNI file copied from root's dp/: in root's
// own cni/, only cni/ is checked, below the root the read checked.
func writeCNI(root safefile.Root, path string, data []byte) error {
	if filepath.Dir(path) != filepath.Join(root.Dir(), KindCNI) {
		return writeFile(path, data)
	}
	return writeBelow(root, path, data)
}

// ReadFile reads and validates any device-info file. Anything but a regular
// file of at most 1 MiB is refused without blocking (a FIFO would hang).
func ReadFile(path string) (*DeviceInfo, error) {
	_, info, err := readFile(path)
	return info, err
}

// ReadFileAs is ReadFile of a file last seen holding data, parsed to info:
// while it holds the same bytes, info is returned unparsed again (ADD reads
// the CNI file back after its delegates ran, which seldom change it).
func ReadFileAs(path string, data []byte, info *DeviceInfo) (*DeviceInfo, error) {
	now, err := readRaw(path)
	if err != nil {
		return nil, err
	}
	if info != nil && bytes.Equal(now, data) {
		return info, nil
	}
	return parseFile(path, now)
}

func readFile(path string) ([]byte, *DeviceInfo, error) {
	data, err := readRaw(path)
	if err != nil {
		return nil, nil, err
	}
	info, err := parseFile(path, data)
	return data, info, err
}

// readRaw is a device-info file's bytes, unparsed.
func readRaw(path string) ([]byte, error) {
	data, err := readRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &notFoundError{path: path}
	}
	if err != nil {
		return nil, fmt.Errorf("read device-info: %w", err)
	}
	return data, nil
}

// parseFile parses the bytes read from path, naming it in the error.
func parseFile(path string, data []byte) (*DeviceInfo, error) {
	info, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// maxFileSize bounds what a read takes in: a device-info map is a few
// hundred bytes, and a bigger file is a mistake, not data to load.
const maxFileSize = 1 << 20

// readRegular reads a regular file of at most maxFileSize bytes, refusing
// links, FIFOs and devices without blocking on them (see safefile): a
// device-info file is written in place by its owner, never linked.
func readRegular(path string) ([]byte, error) {
	return safefile.ReadFile(path, maxFileSize, safefile.NoFollow)
}

// writeFile writes a device-info file atomically, mode 0644 (CNI plugins
// may run as another user), into a directory that is checked first
// (safefile.EnsureDir): a link or a directory others can write, where the
// file would land somewhere else, is an error.
func writeFile(path string, data []byte) error {
	root, err := safefile.EnsureRoot(filepath.Dir(filepath.Dir(path)), 0o755)
	if err != nil {
		return fmt.Errorf("device-info directory: %w", err)
	}
	return writeBelow(root, path, data)
}

// writeBelow is writeFile of a file in a directory just below root, the
// root checked already: only that directory is checked (and made).
func writeBelow(root safefile.Root, path string, data []byte) error {
	if _, err := root.EnsureDir(filepath.Base(filepath.Dir(path)), 0o755); err != nil {
		return fmt.Errorf("device-info directory: %w", err)
	}
	return atomicfile.WriteFile(path, data, 0o644)
}

// RemoveFile removes a device-info file; a missing file (or directory) is
// fine. Its directory is checked first, as for writes: the removal must not
// happen through a link to some other directory.
func RemoveFile(path string) error {
	dir := filepath.Dir(path)
	if _, err := safefile.CheckDirUnder(filepath.Dir(dir), filepath.Base(dir)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove device-info file %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove device-info file: %w", err)
	}
	return nil
}

// File is one file of a Store, as List finds it.
type File struct {
	Kind string // KindDP or KindCNI
	Name string // base name
	Path string
}

// List enumerates the DP and CNI files of the store, for inspection and
// garbage collection. Missing directories are empty; temp files of writes in
// progress and subdirectories are skipped.
func (s *Store) List() ([]File, error) {
	var files []File
	for _, kind := range []string{KindDP, KindCNI} {
		dir := filepath.Join(s.Dir, kind)
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list device-info files: %w", err)
		}
		for _, e := range ents {
			if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			files = append(files, File{Kind: kind, Name: e.Name(), Path: filepath.Join(dir, e.Name())})
		}
	}
	return files, nil
}
