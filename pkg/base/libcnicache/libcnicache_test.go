package libcnicache

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSplitArgs(t *testing.T) {
	for in, want := range map[string][][2]string{
		"":                                      nil,
		"IgnoreUnknown=1;K8S_POD_NAME=p;;X=a=b": {{"IgnoreUnknown", "1"}, {"K8S_POD_NAME", "p"}, {"X", "a=b"}},
		"A=;B":                                  {{"A", ""}, {"B", ""}},
	} {
		if got := SplitArgs(in); !slices.Equal(got, want) {
			t.Errorf("SplitArgs(%q) = %v, want %v", in, got, want)
		}
	}
}

// Shared holders coexist; an exclusive one is refused at once while any
// holds it, and gets it when they are gone.
func TestLockSharedAndExclusive(t *testing.T) {
	cacheDir := filepath.Join(t.TempDir(), "libcni", "net1")
	a, err := Lock(cacheDir, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Lock(filepath.Join(filepath.Dir(cacheDir), "net2"), false)
	if err != nil {
		t.Fatalf("a second shared holder (another network): %v", err)
	}
	if _, err := Lock(cacheDir, true); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("exclusive while shared holders: %v, want EWOULDBLOCK", err)
	}
	a()
	b()
	unlock, err := Lock(cacheDir, true)
	if err != nil {
		t.Fatalf("exclusive with no holder: %v", err)
	}
	unlock()
}
