package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/config"
	"github.com/devplumb/devplumb/pkg/nodeview"
)

// pathFlags are the flags inspect and gc share.
func pathFlags(fs *flag.FlagSet) func() nodeview.Paths {
	root := fs.String("root", "", "one directory holding pod-resources/kubelet.sock, devinfo/ and devplumb/ (nodesim, make demo)")
	p := nodeview.Paths{}
	fs.StringVar(&p.DeviceInfoDir, "devinfo-dir", devinfo.DefaultDir, "device-info directory")
	fs.StringVar(&p.StateDir, "state-dir", config.DefaultStateDir, "devplumb state directory")
	fs.StringVar(&p.PodResources, "pod-resources", config.DefaultPodResourcesSocket, "kubelet PodResources socket")
	return func() nodeview.Paths {
		if *root != "" {
			return nodeview.RootPaths(*root)
		}
		return p
	}
}

func collect(fs *flag.FlagSet, args []string, stderr io.Writer) (*nodeview.View, bool) {
	paths := pathFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	v, err := nodeview.Collect(ctx, paths())
	if err != nil {
		fmt.Fprintf(stderr, "devplumbctl %s: %v\n", fs.Name(), err)
		return nil, false
	}
	return v, true
}

func inspect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the view as JSON")
	v, ok := collect(fs, args, stderr)
	if !ok {
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	} else {
		printView(stdout, v)
	}
	if len(v.Problems) > 0 {
		return 1
	}
	return 0
}

func printView(w io.Writer, v *nodeview.View) {
	fmt.Fprintf(w, "Pods with devices (kubelet %s):\n", v.Paths.PodResources)
	if v.Pods == nil {
		fmt.Fprintf(w, "  unknown: %s\n", v.PodResourcesError)
	}
	for _, p := range v.Pods {
		for res, ids := range p.Devices {
			fmt.Fprintf(w, "  %s/%s  %s: %s\n", p.Namespace, p.Name, res, strings.Join(ids, ", "))
		}
	}
	fmt.Fprintf(w, "Attachments (state %s):\n", v.Paths.StateDir)
	for _, a := range v.Attachments {
		fmt.Fprintf(w, "  %s %s  pod %s  %s  device %s", a.Network, a.IfName, a.Pod, a.ResourceName, a.DeviceID)
		if !a.Complete {
			fmt.Fprint(w, "  (ADD not finished)")
		}
		fmt.Fprintln(w)
		if a.NetworkStatus != nil {
			entry, _ := json.Marshal(a.NetworkStatus)
			fmt.Fprintf(w, "    network-status entry: %s\n", entry)
		}
	}
	fmt.Fprintf(w, "Device-info files (%s):\n", v.Paths.DeviceInfoDir)
	for _, f := range v.Files {
		state := "ok"
		if f.Error != "" {
			state = "INVALID"
		}
		fmt.Fprintf(w, "  %-3s %s  %s\n", f.Kind, f.Name, state)
	}
	fmt.Fprintf(w, "Problems: %d\n", len(v.Problems))
	for _, p := range v.Problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}

func gc(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := nodeview.GCOptions{}
	fs.BoolVar(&opts.DryRun, "dry-run", false, "say what would be removed, remove nothing")
	fs.BoolVar(&opts.Orphans, "orphans", false, "also remove CNI device-info files no devplumb attachment owns (Multus writes such files for its own networks: use with care)")
	v, ok := collect(fs, args, stderr)
	if !ok {
		return 2
	}
	done, err := nodeview.GC(v, opts)
	verb := "removed"
	if opts.DryRun {
		verb = "would remove"
	}
	for _, d := range done {
		fmt.Fprintf(stdout, "%s %s\n", verb, d)
	}
	if err != nil {
		fmt.Fprintf(stderr, "devplumbctl gc: %v\n", err)
		return 1
	}
	return 0
}
