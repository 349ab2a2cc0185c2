package devinfo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// The NAD client only knows DefaultDir, so these tests use the real directory
// with a resource name of their own and remove what they wrote, and the directories
// the NAD client made for it (dp/ and cni/ with mode 000, and their parents).
func nadResource(t *testing.T) string {
	testenv.HoldHostPaths(t) // a real node's test mounts on DefaultDir meanwhile
	removeMadeDirs(t)
	res := fmt.Sprintf("devplumb-test.example.com/nad-%d", os.Getpid())
	t.Cleanup(func() { NewStore("").RemoveDP(res, "0000:01:02.2") })
	return res
}

// removeMadeDirs removes, at the end of the test (after its other cleanups), the
// directories of DefaultDir that did not exist before it, if they are empty.
func removeMadeDirs(t *testing.T) {
	dirs := []string{filepath.Dir(DefaultDir), DefaultDir, filepath.Join(DefaultDir, KindDP), filepath.Join(DefaultDir, KindCNI)}
	var made []string
	for _, d := range dirs {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			made = append(made, d)
		}
	}
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			_ = os.Remove(made[i]) // fails, harmlessly, when something else put a file there
		}
	})
}

func TestNADClientWritesWeRead(t *testing.T) {
	res := nadResource(t)
	in := pciInfo("0000:01:02.2")
	if err := nadutils.SaveDeviceInfoForDP(res, "0000:01:02.2", in); err != nil {
		t.Fatal(err)
	}
	got, err := NewStore("").ReadDP(res, "0000:01:02.2")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Errorf("read %+v, want %+v", got, in)
	}
}

func TestWeWriteNADClientReads(t *testing.T) {
	res := nadResource(t)
	s := NewStore("")
	in := pciInfo("0000:01:02.2")
	if err := s.WriteDP(res, "0000:01:02.2", in); err != nil {
		t.Fatal(err)
	}
	got, err := nadutils.LoadDeviceInfoFromDP(res, "0000:01:02.2")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Errorf("NAD client read %+v, want %+v", got, in)
	}

	name := CNIFileName("ns/net", "0123abcd", "net1")
	cni, err := s.CNIPath(name)
	if err != nil {
		t.Fatal(err)
	}
	if want := nadutils.GetCNIDeviceInfoPath(name); cni != want {
		t.Fatalf("CNIPath = %s, NAD client says %s", cni, want)
	}
	t.Cleanup(func() { os.Remove(cni) })
	if _, _, err := s.CopyDPToCNI(res, "0000:01:02.2", cni); err != nil {
		t.Fatal(err)
	}
	fromCNI, err := nadutils.LoadDeviceInfoFromCNI(cni)
	if err != nil || !reflect.DeepEqual(fromCNI, in) {
		t.Errorf("NAD client read CNI file %+v (%v), want %+v", fromCNI, err, in)
	}
	// A CNI file the NAD client writes (as a CNI plugin would) reads back here.
	os.Remove(cni)
	if err := nadutils.SaveDeviceInfoForCNI(cni, in); err != nil {
		t.Fatal(err)
	}
	if back, err := ReadFile(cni); err != nil || !reflect.DeepEqual(back, in) {
		t.Errorf("read NAD-written CNI file: %+v %v", back, err)
	}
}

// Multus copies a DP file we wrote with the NAD client; we read its copy.
// And a device plugin moving from the NAD client to this package rewrites
// the read-only (0444) file the NAD client left, as a restart does.
func TestNADClientCopiesOurDPFileAndWeReplaceItsFiles(t *testing.T) {
	res := nadResource(t)
	s := NewStore("")
	in := pciInfo("0000:01:02.2")
	if err := s.WriteDP(res, "0000:01:02.2", in); err != nil {
		t.Fatal(err)
	}
	cni, err := s.CNIPath(CNIFileName("nad-net", fmt.Sprintf("c%d", os.Getpid()), "net1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(cni) })
	if err := nadutils.CopyDeviceInfoForCNIFromDP(cni, res, "0000:01:02.2"); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(cni); err != nil || !reflect.DeepEqual(got, in) {
		t.Errorf("read the NAD client's CNI copy: %+v %v", got, err)
	}

	if err := s.RemoveDP(res, "0000:01:02.2"); err != nil {
		t.Fatal(err)
	}
	if err := nadutils.SaveDeviceInfoForDP(res, "0000:01:02.2", in); err != nil {
		t.Fatal(err)
	}
	again := pciInfo("0000:01:02.3")
	if err := s.WriteDP(res, "0000:01:02.2", again); err != nil {
		t.Fatalf("overwrite the NAD client's file: %v", err)
	}
	if got, err := nadutils.LoadDeviceInfoFromDP(res, "0000:01:02.2"); err != nil || !reflect.DeepEqual(got, again) {
		t.Errorf("NAD client read %+v %v after our rewrite", got, err)
	}
	if err := nadutils.CleanDeviceInfoForDP(res, "0000:01:02.2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadDP(res, "0000:01:02.2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after the NAD client's clean: %v", err)
	}
}
