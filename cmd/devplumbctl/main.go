// Command devplumbctl inspects and repairs a node's devplumb state and
// validates the files devplumb, device plugins and CDI consumers read.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  devplumbctl validate devinfo|netconf|cdi FILE...
      exit 0 when all are valid, else one "FILE: reason" line each and exit 1
  devplumbctl inspect [--json] [--root DIR | --devinfo-dir DIR --state-dir DIR --pod-resources SOCKET]
      the kubelet's device assignments, devplumb's claims and device-info files, and
      problems; exit 0 when there are none, 1 when there are, 2 when it cannot look
  devplumbctl gc [--dry-run] [--orphans] [same path flags as inspect]
      remove the claims and CNI device-info files of attachments whose pod the kubelet
      no longer gives the device (a claim whose netns still exists is kept); the
      delegate's own state (IPAM leases) is not touched: run the CNI DEL for that
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "inspect":
		return inspect(args[1:], stdout, stderr)
	case "gc":
		return gc(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "devplumbctl: unknown command %q\n%s", args[0], usage)
	return 2
}
