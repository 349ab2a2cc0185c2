// Command devplumb is the CNI entry point of the devplumb meta-plugin: the
// binary network configs name and the runtime executes. It starts about as
// fast as the bridge plugin (deps_test.go keeps its imports to the standard
// library, golang.org/x/sys/unix, the CNI library and the agent protocol) and
// hands the call to the node agent when one answers, running the delegates
// itself in the runtime's context; otherwise it execs devplumb-direct, the
// whole plugin, installed beside it (docs/architecture.md, "the node agent").
package main

import (
	"os"
	"runtime"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	pversion "github.com/devplumb/devplumb/pkg/base/version"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// supportedVersions are the CNI versions devplumb accepts: pkg/cni/config's
// SupportedVersions, which this binary cannot link (main_test.go keeps the
// two equal). VERSION is answered here, without the agent or devplumb-direct.
var supportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

const (
	// socketEnv overrides agentproto.DefaultSocket: tests, and installs that
	// run the agent elsewhere.
	socketEnv = "DEVPLUMB_AGENT_SOCKET"
	// dialBound is the design's bound on reaching the agent (connect and
	// hello): beyond it the call is done by devplumb-direct. A burst of 110
	// pods starting at once on 2 CPUs needed more than 100 ms (half the calls
	// fell back, make bench P8); a dead agent's socket is refused at once.
	dialBound = time.Second
)

func main() {
	// One P: the entry point does one thing at a time (its own code, then
	// waits for the agent or for the delegates it runs), and a second P only
	// spins looking for work each time it waits for the agent, on the CPU
	// the agent then needs: about 6 ms of each ADD+DEL through the agent on
	// 2 CPUs with nothing else busy (make bench P1 without its API server;
	// its one-P pass-through row shows a plain meta-plugin, waiting only for
	// its delegate, gains nothing from it).
	runtime.GOMAXPROCS(1)
	e := &entry{socket: agentSocket(), build: pversion.Get().String()}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:   func(a *skel.CmdArgs) error { return e.call(agentproto.CmdAdd, a) },
		Del:   func(a *skel.CmdArgs) error { return e.call(agentproto.CmdDel, a) },
		Check: func(a *skel.CmdArgs) error { return e.call(agentproto.CmdCheck, a) },
		// GC and STATUS (CNI 1.1) look at every record of the node and the
		// delegates' own state; the protocol has no message for them yet, so
		// devplumb-direct does them whether or not an agent runs.
		GC:     func(a *skel.CmdArgs) error { return execDirect(a, nil) },
		Status: func(a *skel.CmdArgs) error { return execDirect(a, nil) },
	}, version.PluginSupports(supportedVersions...),
		"devplumb "+e.build+": CNI meta-plugin for device plugin resources (NPWG device-info spec 1.1.0)")
}

// agentSocket is where the agent listens: $DEVPLUMB_AGENT_SOCKET, or the
// default.
func agentSocket() string {
	if s := os.Getenv(socketEnv); s != "" {
		return s
	}
	return agentproto.DefaultSocket
}
