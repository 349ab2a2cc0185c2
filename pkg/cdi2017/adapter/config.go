// Package adapter serves each binary of the 2017 CDI draft (pkg/cdi2017/protocol)
// as a kubelet device plugin (pkg/deviceplugin), so such a binary hands
// devices to pods on today's kubelet, through CDI device names (KEP-4009).
//
// Per config /etc/cdi/<type>.d/<name>.conf the adapter serves the resource
// <vendor>/<type>. Its devices are slots "<type>-<n>": as many as INFO
// says are free, plus those held by live allocations. Allocate runs ADD for
// the container's slot count with a fresh request ID (recorded before the
// call), writes the nodes of the reply as a CDI device named by the request
// ID into the resource's CDI spec, and answers with that CDI name and
// DeviceSpecs for runtimes without CDI. DEL runs when PodResources no longer
// shows the allocation's slots on any pod (polled), when the kubelet hands
// one of its slots out again (it must be free then), when the kubelet never
// showed it within the grace period (its admission failed after Allocate),
// and at the adapter's start for every allocation no pod holds.
//
// Subtypes that INFO may advertise are not served: the device plugin API
// allocates one resource per call, and the draft has no way to join them.
// No CDI_REQUEST_NUMA_LOCALITY is passed: Allocate tells a plugin nothing
// of the container's NUMA affinity (the slots have none).
package adapter

import (
	"fmt"
	"time"

	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/podresources"
)

// Defaults.
const (
	DefaultVendor   = "cdi.devplumb.io"
	DefaultStateDir = "/var/lib/devplumb/cdi-adapter"
	DefaultPoll     = 10 * time.Second
	DefaultGrace    = 30 * time.Second
)

// Config configures the adapter; every path has a default.
type Config struct {
	ConfDir            string        // the draft's configs; default /etc/cdi
	BinDir             string        // the draft's binaries; default /opt/cdi/bin
	Vendor             string        // domain of the resource names and CDI kinds
	PluginDir          string        // kubelet device plugin dir
	PodResourcesSocket string        // kubelet PodResources socket
	CDIDir             string        // where CDI specs are written; default /var/run/cdi
	StateDir           string        // the adapter's allocations
	Poll               time.Duration // PodResources poll interval
	Grace              time.Duration // how long an allocation PodResources never showed is kept
	Timeout            time.Duration // per binary call; default protocol.DefaultTimeout
}

func (c *Config) defaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.ConfDir, protocol.DefaultConfDir)
	def(&c.BinDir, protocol.DefaultBinDir)
	def(&c.Vendor, DefaultVendor)
	def(&c.PodResourcesSocket, podresources.DefaultSocket)
	def(&c.CDIDir, cdispec.DefaultDir)
	def(&c.StateDir, DefaultStateDir)
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
}

// resourceName is the kubelet resource (and CDI kind) of a resource-type.
func (c *Config) resourceName(typ string) string { return fmt.Sprintf("%s/%s", c.Vendor, typ) }
