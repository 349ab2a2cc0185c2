package e2etest

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
)

// ServerAtLeast tells whether the API server c talks to is at least major.minor: the
// matrix runs the suites on older minors too, where some features are off.
func ServerAtLeast(t *testing.T, c discovery.ServerVersionInterface, major, minor uint) bool {
	t.Helper()
	info, err := c.ServerVersion()
	Must(t, err)
	v, err := version.ParseGeneric(info.GitVersion)
	Must(t, err)
	return v.AtLeast(version.MajorMinor(major, minor))
}
