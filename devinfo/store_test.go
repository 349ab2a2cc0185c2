package devinfo

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/pkg/testenv"
)

func pciInfo(addr string) *DeviceInfo {
	return &DeviceInfo{Type: TypePCI, Version: Version, Pci: &PciDevice{PciAddress: addr, PfPciAddress: "0000:01:00.0"}}
}

func TestDPPathNaming(t *testing.T) {
	s := NewStore("/base")
	got, err := s.DPPath("intel.com/sriov_netdevice", "0000:01:02.2")
	if err != nil {
		t.Fatal(err)
	}
	if want := "/base/dp/intel.com-sriov_netdevice-0000:01:02.2-device.json"; got != want {
		t.Errorf("DPPath = %s, want %s", got, want)
	}
	if NewStore("").Dir != DefaultDir {
		t.Error("empty dir is not DefaultDir")
	}
}

func TestNamesLeavingTheDirectoryAreRejected(t *testing.T) {
	s := NewStore(t.TempDir())
	bad := []struct{ res, id string }{
		{"", "x"}, {"example.com/net", ""}, {"../etc", "x"}, {"example.com/..", "x"},
		{"example.com//net", "x"}, {"/abs", "x"}, {"example.com/net", ".."},
		{"example.com/net", "."}, {"example.com/net", "a/b"}, {"example.com/net", "../../etc/passwd"},
		{"example.com/net", "a\x00b"}, {"exa\x00mple.com/net", "x"}, {"example.com/net", strings.Repeat("a", 300)},
	}
	for _, b := range bad {
		if p, err := s.DPPath(b.res, b.id); err == nil {
			t.Errorf("DPPath(%q, %q) = %s, want error", b.res, b.id, p)
		}
		if err := s.WriteDP(b.res, b.id, pciInfo("0000:01:02.2")); err == nil {
			t.Errorf("WriteDP(%q, %q) accepted", b.res, b.id)
		}
	}
	for _, name := range []string{"", ".", "..", "a\x00"} {
		if p, err := s.CNIPath(name); err == nil {
			t.Errorf("CNIPath(%q) = %s, want error", name, p)
		}
	}
	assertOnlyFiles(t, s.Dir)
}

func TestWriteReadRemoveDP(t *testing.T) {
	s := NewStore(filepath.Join(t.TempDir(), "devinfo"))
	in := pciInfo("0000:01:02.2")
	in.Version = "1.0.0" // written as 1.1.0 whatever the caller says
	if err := s.WriteDP("example.com/net", "0000:01:02.2", in); err != nil {
		t.Fatal(err)
	}
	// Overwrite: a restarted device plugin rewrites its files.
	if err := s.WriteDP("example.com/net", "0000:01:02.2", in); err != nil {
		t.Fatalf("rewrite: %v", err)
	}
	path, _ := s.DPPath("example.com/net", "0000:01:02.2")
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("stat %s: %v mode %v", path, err, st.Mode())
	}
	if d, _ := os.Stat(filepath.Dir(path)); d.Mode().Perm() != 0o755 {
		t.Errorf("dp dir mode %v", d.Mode().Perm())
	}
	got, err := s.ReadDP("example.com/net", "0000:01:02.2")
	if err != nil {
		t.Fatal(err)
	}
	want := *in
	want.Version = Version
	if !reflect.DeepEqual(got, &want) {
		t.Errorf("read %+v, want %+v", got, want)
	}
	for range 2 {
		if err := s.RemoveDP("example.com/net", "0000:01:02.2"); err != nil {
			t.Fatalf("remove: %v", err)
		}
	}
	_, err = s.ReadDP("example.com/net", "0000:01:02.2")
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("want not found after remove, got %v", err)
	}
}

// A caller need not set the version: WriteDP writes 1.1.0.
func TestWriteDPSetsVersion(t *testing.T) {
	s := NewStore(t.TempDir())
	info := pciInfo("0000:01:02.2")
	info.Version = ""
	if err := s.WriteDP("example.com/net", "d", info); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadDP("example.com/net", "d"); err != nil || got.Version != Version {
		t.Fatalf("read %+v, %v", got, err)
	}
	if info.Version != "" {
		t.Error("WriteDP changed the caller's value")
	}
	if err := s.WriteDP("example.com/net", "d", nil); err == nil {
		t.Error("nil info accepted")
	}
}

// The longest name a DP path allows is also written (atomically).
func TestWriteDPLongestName(t *testing.T) {
	s := NewStore(t.TempDir())
	id := strings.Repeat("i", 255-len("example.com-net--device.json"))
	if err := s.WriteDP("example.com/net", id, pciInfo("0000:01:02.2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadDP("example.com/net", id); err != nil {
		t.Fatal(err)
	}
}

// Something other than a regular file at a device-info path is refused at
// once: a FIFO would otherwise block the reading CNI ADD forever.
func TestReadRefusesNonRegularFiles(t *testing.T) {
	s := NewStore(t.TempDir())
	p, _ := s.DPPath("example.com/net", "fifo")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	dst, _ := s.CNIPath("x")
	_, _, err := s.CopyDPToCNI("example.com/net", "fifo", dst)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("want a not-a-regular-file error, got %v", err)
	}
	big, _ := s.DPPath("example.com/net", "big")
	writeRaw(t, big, bytes.Repeat([]byte(" "), maxFileSize+1))
	if _, err := s.ReadDP("example.com/net", "big"); err == nil || !errors.Is(err, safefile.ErrTooLarge) {
		t.Fatalf("want a size error, got %v", err)
	}
	// Links are not followed: one to /dev/zero, or to a valid file elsewhere.
	elsewhere := filepath.Join(t.TempDir(), "valid.json")
	writeRaw(t, elsewhere, []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:00.1"}}`))
	for dev, target := range map[string]string{"zero": "/dev/zero", "valid": elsewhere} {
		p, _ := s.DPPath("example.com/net", dev)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadDP("example.com/net", dev); !errors.Is(err, safefile.ErrNotRegular) || !strings.Contains(err.Error(), p) {
			t.Errorf("DP file linked to %s: %v", target, err)
		}
	}
}

func TestWriteDPRejectsInvalid(t *testing.T) {
	s := NewStore(t.TempDir())
	err := s.WriteDP("example.com/net", "x", &DeviceInfo{Type: TypePCI, Pci: &PciDevice{PciAddress: "bad"}})
	if err == nil || !strings.Contains(err.Error(), "pci.pci-address") {
		t.Fatalf("want a pci-address error, got %v", err)
	}
	assertOnlyFiles(t, s.Dir)
}

func TestCopyDPToCNIKeepsBytes(t *testing.T) {
	s := NewStore(t.TempDir())
	src, _ := s.DPPath("example.com/net", "0000:01:02.2")
	raw := []byte(`{"type":"pci","version":"1.0.0","vendor-extension":{"a":1},"pci":{"pci-address":"0000:01:02.2","future-key":"kept"}}`)
	writeRaw(t, src, raw)
	dst, _ := s.CNIPath(CNIFileName("net/a", "c1d2", "net1"))
	info, _, err := s.CopyDPToCNI("example.com/net", "0000:01:02.2", dst)
	if err != nil {
		t.Fatal(err)
	}
	if info.Pci.PciAddress != "0000:01:02.2" {
		t.Errorf("returned info %+v", info)
	}
	got, _ := os.ReadFile(dst)
	if !bytes.Equal(got, raw) {
		t.Errorf("CNI file = %s, want the DP file's bytes", got)
	}
	if filepath.Base(dst) != "net-a-c1d2_net1" {
		t.Errorf("CNI file name %s", filepath.Base(dst))
	}
}

func TestCopyDPToCNIMissingAndInvalid(t *testing.T) {
	s := NewStore(t.TempDir())
	dst, _ := s.CNIPath("x")
	if _, _, err := s.CopyDPToCNI("example.com/net", "nodev", dst); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing DP file: want ErrNotFound, got %v", err)
	}
	src, _ := s.DPPath("example.com/net", "bad")
	writeRaw(t, src, []byte(`{"type":"pci","version":"1.1.0"}`))
	_, _, err := s.CopyDPToCNI("example.com/net", "bad", dst)
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), src) {
		t.Errorf("invalid DP file: want a validation error naming %s, got %v", src, err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Error("CNI file written from an invalid DP file")
	}
}

func TestList(t *testing.T) {
	s := NewStore(t.TempDir())
	if files, err := s.List(); err != nil || len(files) != 0 {
		t.Fatalf("empty store: %v %v", files, err)
	}
	if err := s.WriteDP("example.com/net", "a", pciInfo("0000:01:02.2")); err != nil {
		t.Fatal(err)
	}
	cni, _ := s.CNIPath("n-c_eth1")
	writeRaw(t, cni, []byte("{}"))
	writeRaw(t, filepath.Join(s.Dir, "cni", ".n-c_eth1.tmp-123"), []byte("{"))
	files, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	want := []File{
		{Kind: KindDP, Name: "example.com-net-a-device.json", Path: filepath.Join(s.Dir, "dp", "example.com-net-a-device.json")},
		{Kind: KindCNI, Name: "n-c_eth1", Path: cni},
	}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("List = %+v, want %+v", files, want)
	}
}

func TestConcurrentWritersNeverLeaveMixedFile(t *testing.T) {
	s := NewStore(t.TempDir())
	var wg sync.WaitGroup
	infos := map[string]bool{}
	for i := range 16 {
		infos[fmt.Sprintf("0000:01:%02x.%d", i%32, i%8)] = true
	}
	for addr := range infos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info := pciInfo(addr)
			for range 25 {
				if err := s.WriteDP("example.com/net", "dev", info); err != nil {
					t.Error(err)
				}
				// Every read sees one writer's whole file, not a mix.
				got, err := s.ReadDP("example.com/net", "dev")
				if err != nil {
					t.Error(err)
				} else if !infos[got.Pci.PciAddress] || !reflect.DeepEqual(got, pciInfo(got.Pci.PciAddress)) {
					t.Errorf("read a file no writer wrote: %+v", got.Pci)
				}
			}
		}()
	}
	wg.Wait()
	assertOnlyFiles(t, s.Dir, "dp/example.com-net-dev-device.json")
}

func writeRaw(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// assertOnlyFiles fails unless the regular files under dir are exactly want.
func assertOnlyFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	got := testenv.Files(t, dir)
	if !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
		t.Errorf("files under %s = %v, want %v", dir, got, want)
	}
}

// A cni/ or dp/ directory that is a link (or writable by others) is never
// written or removed in: the file would land in, or vanish from, the link's
// target.
func TestLinkedDirectoriesAreRefused(t *testing.T) {
	for _, kind := range []string{KindCNI, KindDP} {
		for _, how := range []string{"link", "writable"} {
			s, target := NewStore(t.TempDir()), t.TempDir()
			victim := filepath.Join(target, "x")
			writeRaw(t, victim, []byte("keep"))
			dir := filepath.Join(s.Dir, kind)
			if how == "link" {
				if err := os.Symlink(target, dir); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Mkdir(dir, 0o777); err != nil || os.Chmod(dir, 0o777) != nil {
				t.Fatal(err)
			}
			var err error
			if kind == KindCNI {
				err = s.WriteDP("example.com/net", "d0", pciInfo("0000:01:00.1"))
				if err == nil {
					_, _, err = s.CopyDPToCNI("example.com/net", "d0", filepath.Join(dir, "x"))
				}
			} else {
				err = s.WriteDP("example.com/net", "d0", pciInfo("0000:01:00.1"))
			}
			if !errors.Is(err, safefile.ErrUnsafeDir) {
				t.Errorf("%s %s: write: %v", kind, how, err)
			}
			if err := RemoveFile(filepath.Join(dir, "x")); !errors.Is(err, safefile.ErrUnsafeDir) {
				t.Errorf("%s %s: remove: %v", kind, how, err)
			}
			if data, err := os.ReadFile(victim); err != nil || string(data) != "keep" {
				t.Errorf("%s %s: target touched: %q %v", kind, how, data, err)
			}
			if kind == KindDP {
				// Nor is a device plugin file read from such a directory.
				writeRaw(t, filepath.Join(target, "example.com-net-d0-device.json"), []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:00.1"}}`))
				if _, err := s.ReadDP("example.com/net", "d0"); !errors.Is(err, safefile.ErrUnsafeDir) {
					t.Errorf("dp %s: read: %v", how, err)
				}
			}
		}
	}
}

// A CNI file name too long for a file keeps within the limit, stays
// deterministic and tells two attachments apart.
func TestCNIFileNameLong(t *testing.T) {
	cid := strings.Repeat("c", 300)
	a, b := CNIFileName("net", cid, "net1"), CNIFileName("net", cid, "net2")
	if len(a) > 255 || a == b || a != CNIFileName("net", cid, "net1") {
		t.Errorf("%d-byte %q, %q", len(a), a, b)
	}
	if _, err := NewStore("/d").CNIPath(a); err != nil {
		t.Error(err)
	}
	if got := CNIFileName("net", "c1", "net1"); got != "net-c1_net1" {
		t.Errorf("short name changed: %q", got)
	}
}

// ReadFileAs returns the info it was given while the file holds the bytes
// it was given, and what the file holds once those change.
func TestReadFileAs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	data := []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:00.1"}}`)
	writeRaw(t, path, data)
	known := pciInfo("0000:01:00.1")
	if got, err := ReadFileAs(path, data, known); err != nil || got != known {
		t.Errorf("unchanged file: %+v, %v; want the info given", got, err)
	}
	writeRaw(t, path, []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:00.2"}}`))
	if got, err := ReadFileAs(path, data, known); err != nil || got == known || got.Pci.PciAddress != "0000:01:00.2" {
		t.Errorf("changed file: %+v, %v; want it parsed", got, err)
	}
	writeRaw(t, path, []byte(`{"type":"pci"`))
	if _, err := ReadFileAs(path, data, known); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a changed file that does not parse: %v", err)
	}
	if _, err := ReadFileAs(filepath.Join(t.TempDir(), "none"), data, known); !errors.Is(err, ErrNotFound) {
		t.Errorf("no file: %v", err)
	}
}
