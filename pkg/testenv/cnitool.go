package testenv

import (
	"crypto/sha512"
	"fmt"
)

// CnitoolResults is where cnitool keeps libcni's result cache, an entry per ADD
// (<network>-<container ID>-<ifname>) that its DEL removes: cnitool v1.3.1 has no
// setting to move it.
const CnitoolResults = "/var/lib/cni/results"

// CnitoolID is the container ID cnitool gives its calls into the netns at path: a hash
// of the path (cnitool/cmd/root.go).
func CnitoolID(netns string) string {
	s := sha512.Sum512([]byte(netns))
	return fmt.Sprintf("cnitool-%x", s[:10])
}
