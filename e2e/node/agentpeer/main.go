// Command agentpeer says hello to a devplumb agent's socket as whoever runs it and prints
// the outcome: "served" and the agent's build, or "refused: " and why. e2e/node runs it as
// a non-root user (with and without CAP_DAC_OVERRIDE) against the real agent.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: agentpeer SOCKET")
		os.Exit(2)
	}
	c, err := agentproto.Dial(os.Args[1], 5*time.Second, "agentpeer")
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	defer c.Close()
	fmt.Println("served by build", c.Agent.Build)
}
