// Command cdi-devnodes is the reference binary of the 2017 CDI draft: it
// hands out device nodes matching a glob (see pkg/cdi2017/devnodes). It is run
// by a caller with CDI_COMMAND and friends in its environment and its
// config on stdin, e.g.
//
//	env CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:3 CDI_REQUEST_ID=7890 \
//	    /opt/cdi/bin/cdi-devnodes < /etc/cdi/tty.d/devnodes.conf
//
// Run by a person without CDI_COMMAND, it takes --help and --version like the
// other binaries.
//
//	cdi-devnodes --help | --version
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/devplumb/devplumb/pkg/base/version"
	"github.com/devplumb/devplumb/pkg/cdi2017/devnodes"
	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// run answers a call of the draft, which passes everything in the
// environment and on stdin and no arguments, as the draft says (a call
// without CDI_COMMAND gets the draft's error reply). Only arguments without
// CDI_COMMAND are flags.
func run(args []string, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || env(protocol.EnvCommand) != "" {
		return devnodes.Handler().Serve(env, stdin, stdout)
	}
	fs := flag.NewFlagSet("cdi-devnodes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: env CDI_COMMAND=VERSION|INFO|ADD|DEL CDI_VERSION=V [CDI_REQUEST=TYPE:N] [CDI_REQUEST_ID=ID] cdi-devnodes < CONFIG
       cdi-devnodes --help | --version

A binary of the 2017 CDI draft: a caller (cdi-adapter) runs it with the command
in its environment and its config on stdin, and reads the JSON reply on stdout.
It hands out the device nodes matching the config's args.glob.

`)
		fs.PrintDefaults()
	}
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for, and printed: not an error
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.Line("cdi-devnodes"))
		return 0
	}
	fmt.Fprintln(stderr, "cdi-devnodes: takes no arguments but --help and --version; the draft's calls pass CDI_COMMAND in the environment")
	fs.Usage()
	return 2
}
