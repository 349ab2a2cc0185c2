// Command cdi-devnodes is the reference binary of the 2017 CDI draft: it
// hands out device nodes matching a glob (see pkg/cdi2017/devnodes). It is run
// by a caller with CDI_COMMAND and friends in its environment and its
// config on stdin, e.g.
//
//	env CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:3 CDI_REQUEST_ID=7890 \
//	    /opt/cdi/bin/cdi-devnodes < /etc/cdi/tty.d/devnodes.conf
package main

import (
	"github.com/devplumb/devplumb/pkg/cdi2017/devnodes"
	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
)

func main() {
	protocol.Main(devnodes.Handler())
}
