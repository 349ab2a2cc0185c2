// Command devplumbctl inspects and repairs a node's devplumb state and
// validates the files devplumb, device plugins and CDI consumers read.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/devplumb/devplumb/pkg/base/version"
)

const usage = `usage:
  devplumbctl validate devinfo|netconf|node|cdi FILE...
      exit 0 when all are valid, else one "FILE: reason" line each and exit 1;
      a netconf is a devplumb config, a conflist holding devplumb entries, or a
      NetworkAttachmentDefinition (JSON or YAML) whose config is either
  devplumbctl inspect [--json] [--root DIR | --devinfo-dir DIR --state-dir DIR --pod-resources SOCKET]
      the kubelet's device assignments, devplumb's attachment records and device-info files, and
      problems; exit 0 when there are none, 1 when there are, 2 when it cannot look
  devplumbctl gc [--dry-run] [--orphans] [--json] [--cni-path DIR] [same path flags as inspect]
      remove the records and CNI device-info files of attachments whose pod the kubelet
      no longer gives the device (one whose netns still exists is kept), after
      running the recorded delegates' DEL (found in --cni-path; by default where the ADD
      found them, else /opt/cni/bin) so that their IPAM leases go too; one whose delegate DEL fails is kept
  devplumbctl metrics [--listen ADDR] [--state-dir DIR] [--agent-metrics PATH]
      serve the timings of devplumb's ADD and DEL phases as Prometheus histograms,
      and the node agent's metrics (devplumb-agent) beside them
  devplumbctl version | --version
  devplumbctl COMMAND --help
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
	case "metrics":
		return metrics(args[1:], stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "--version":
		fmt.Fprintln(stdout, version.Line("devplumbctl"))
		return 0
	}
	fmt.Fprintf(stderr, "devplumbctl: unknown command %q\n%s", args[0], usage)
	return 2
}

// parseExit is the exit status for a flag parsing error: 0 when help was
// asked for (the flag package printed it), 2 for a mistake.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
