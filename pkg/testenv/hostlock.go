package testenv

// The host lock serialises the test packages that make directories (or mount points)
// on the host's paths the kubelet, Multus and the NAD client library hard-code
// (/var/lib/kubelet, /var/run/k8s.cni.cncf.io): `go test ./...` runs packages at once,
// and one package's clean-up removing a directory another mounts on (or made a child
// in) breaks both. e2e/node holds it for its whole run.

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// hostLockName is an abstract unix socket: held while the process lives, no file left.
const hostLockName = "@devplumb-e2e-node"

// HostLockBound is how long HoldHost waits for another test process: a whole e2e/node run
// on a loaded machine (go test -timeout is 45m).
const HostLockBound = 30 * time.Minute

// HoldHost waits, up to bound, until no other process holds the host lock, then holds
// it until release is called (or the process ends).
func HoldHost(bound time.Duration) (release func(), err error) {
	return holdLock(hostLockName, bound)
}

// holdLock is HoldHost for the abstract socket name (its own test uses another
// name: an e2e/node run of the same go test holds the host's for minutes).
func holdLock(name string, bound time.Duration) (release func(), err error) {
	deadline := time.Now().Add(bound)
	for {
		l, err := net.Listen("unix", name)
		if err == nil {
			return func() { _ = l.Close() }, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("another end-to-end test process has held the host's mount points for %s: %w", bound, err)
		}
		time.Sleep(time.Second)
	}
}

// HoldHostPaths holds the host lock for the rest of t (released after t's other
// clean-ups, which are registered later and so run first), failing t if it waits too long.
func HoldHostPaths(t *testing.T) {
	t.Helper()
	release, err := HoldHost(HostLockBound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}
