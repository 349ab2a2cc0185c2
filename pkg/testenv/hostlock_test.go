package testenv

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// One holder at a time: a second waits its bound out and says why; after the first
// releases, it gets the lock.
func TestHostLockExcludes(t *testing.T) {
	name := hostLockName + "-test-" + strconv.Itoa(os.Getpid())
	release, err := holdLock(name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holdLock(name, 1500*time.Millisecond); err == nil || !strings.Contains(err.Error(), "mount points") {
		t.Fatalf("second holder: %v, want an error saying the lock is held", err)
	}
	release()
	again, err := holdLock(name, time.Minute)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again()
}
