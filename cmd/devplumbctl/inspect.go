package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/nodestate"
)

// pathFlags are the flags inspect and gc share.
func pathFlags(fs *flag.FlagSet) func() nodestate.Paths {
	root := fs.String("root", "", "one directory holding pod-resources/kubelet.sock, devinfo/ and devplumb/ (nodesim, make demo)")
	p := nodestate.Paths{}
	fs.StringVar(&p.DeviceInfoDir, "devinfo-dir", devinfo.DefaultDir, "device-info directory")
	fs.StringVar(&p.StateDir, "state-dir", config.DefaultStateDir, "devplumb state directory")
	fs.StringVar(&p.PodResources, "pod-resources", config.DefaultPodResourcesSocket, "kubelet PodResources socket")
	return func() nodestate.Paths {
		if *root != "" {
			return nodestate.RootPaths(*root)
		}
		return p
	}
}

// parsePaths parses inspect's and gc's flags; code is the exit status
// when ok is false (0 after --help).
func parsePaths(fs *flag.FlagSet, args []string) (_ nodestate.Paths, code int, ok bool) {
	paths := pathFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nodestate.Paths{}, parseExit(err), false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "devplumbctl %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return nodestate.Paths{}, 2, false
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["root"] && (set["devinfo-dir"] || set["state-dir"] || set["pod-resources"]) {
		fmt.Fprintf(fs.Output(), "devplumbctl %s: --root sets all three paths: give --root, or --devinfo-dir/--state-dir/--pod-resources, not both\n", fs.Name())
		return nodestate.Paths{}, 2, false
	}
	p, err := paths().Abs()
	if err != nil {
		fmt.Fprintf(fs.Output(), "devplumbctl %s: %v\n", fs.Name(), err)
		return nodestate.Paths{}, 2, false
	}
	return p, 0, true
}

func timeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 15*time.Second)
}

func inspect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the view as JSON")
	paths, code, ok := parsePaths(fs, args)
	if !ok {
		return code
	}
	ctx, cancel := timeout()
	defer cancel()
	v, err := nodestate.Collect(ctx, paths)
	if err != nil {
		fmt.Fprintf(stderr, "devplumbctl inspect: %v\n", err)
		return 2
	}
	if *asJSON {
		if err := printJSON(stdout, v); err != nil {
			fmt.Fprintf(stderr, "devplumbctl inspect: %v\n", err)
			return 2
		}
	} else {
		printView(stdout, v)
	}
	return inspectExit(v, stderr)
}

// inspectExit is 2 when the kubelet could not be asked: without its answer
// inspect cannot tell which attachments still hold their pod's device, so
// "no problems found" would not be true (the view above still shows the
// state and files, which one needs most when the kubelet is down). Else 1
// when there are problems, 0 when there are none.
func inspectExit(v *nodestate.View, stderr io.Writer) int {
	if v.Pods == nil {
		fmt.Fprintf(stderr, "devplumbctl inspect: cannot ask the kubelet's PodResources API at %s (%s): "+
			"is the kubelet running, and is --pod-resources (or --root) right?\n", v.Paths.PodResources, v.PodResourcesError)
		return 2
	}
	if len(v.Problems) > 0 {
		return 1
	}
	return 0
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printView(w io.Writer, v *nodestate.View) {
	fmt.Fprintf(w, "Pods with devices (kubelet %s):\n", v.Paths.PodResources)
	switch {
	case v.Pods == nil:
		fmt.Fprintf(w, "  unknown: %s\n", v.PodResourcesError)
	case len(v.Pods) == 0:
		fmt.Fprintln(w, "  none")
	}
	for _, p := range v.Pods {
		for _, res := range slices.Sorted(maps.Keys(p.Devices)) {
			fmt.Fprintf(w, "  %s/%s  %s: %s\n", p.Namespace, p.Name, res, strings.Join(p.Devices[res], ", "))
		}
	}
	fmt.Fprintf(w, "Attachments (state %s):\n", v.Paths.StateDir)
	if len(v.Attachments) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, a := range v.Attachments {
		printAttachment(w, a)
	}
	fmt.Fprintf(w, "Device-info files (%s):\n", v.Paths.DeviceInfoDir)
	if len(v.Files) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, f := range v.Files {
		state := "ok"
		if f.Error != "" {
			state = "INVALID (see problems)"
		}
		fmt.Fprintf(w, "  %-3s %s  %s\n", f.Kind, f.Name, state)
	}
	fmt.Fprintf(w, "Problems: %d\n", len(v.Problems))
	for _, p := range v.Problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}

// networkName is the attachment's network as the pod's network-status names it
// ("<namespace>/<NAD>" when the config names a NetworkAttachmentDefinition), with the
// config's name when that differs.
func networkName(a nodestate.Attachment) string {
	if a.NetworkStatus == nil || a.NetworkStatus.Name == "" || a.NetworkStatus.Name == a.Network {
		return a.Network
	}
	return fmt.Sprintf("%s (config %q)", a.NetworkStatus.Name, a.Network)
}

func printAttachment(w io.Writer, a nodestate.Attachment) {
	res := a.ResourceName
	if res == "" {
		res = "(deviceID from the config)"
	}
	fmt.Fprintf(w, "  network %s  interface %s  pod %s  %s device %s", networkName(a), a.IfName, a.Pod, res, a.DeviceID)
	switch {
	case !a.Complete:
		fmt.Fprint(w, "  (ADD not finished)")
	case a.Stale:
		fmt.Fprint(w, "  (STALE: the kubelet no longer gives the pod this device)")
	}
	fmt.Fprintln(w)
	switch {
	case a.NoCNIFile:
		fmt.Fprintln(w, "    CNI device-info file: none (the device plugin wrote no device-info for this device)")
	case a.CNIFile != "":
		fmt.Fprintf(w, "    CNI device-info file: %s\n", a.CNIFile)
	}
	if a.Claim != nil {
		fmt.Fprintf(w, "    DRA: %s (its status.devices entry is devplumb's)\n", a.Claim)
	}
	if a.NetworkStatus != nil {
		entry, _ := json.Marshal(a.NetworkStatus)
		fmt.Fprintf(w, "    network-status entry: %s\n", entry)
	}
	if len(a.Phases) > 0 {
		parts := make([]string, len(a.Phases))
		for i, ph := range a.Phases {
			parts[i] = fmt.Sprintf("%s %s", ph.Name, ph.Duration.Round(time.Microsecond))
		}
		fmt.Fprintf(w, "    ADD took: %s\n", strings.Join(parts, ", "))
	}
}

func gc(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := nodestate.GCOptions{}
	fs.BoolVar(&opts.DryRun, "dry-run", false, "say what would be removed, remove nothing")
	fs.BoolVar(&opts.Orphans, "orphans", false, "also remove CNI device-info files no devplumb attachment owns (Multus writes such files for its own networks: use with care)")
	asJSON := fs.Bool("json", false, `print what was done as a JSON list of {"Verb","What","Why"}`)
	fs.StringVar(&opts.CNIPath, "cni-path", "", "where the recorded delegate plugins are (colon separated), to run their DEL; default: the CNI path each ADD recorded, else "+nodestate.DefaultCNIPath)
	paths, code, ok := parsePaths(fs, args)
	if !ok {
		return code
	}
	ctx, cancel := timeout()
	defer cancel()
	acts, err := nodestate.GC(ctx, paths, opts)
	acts = pastTense(acts, opts.DryRun)
	if *asJSON {
		if jerr := printJSON(stdout, acts); jerr != nil && err == nil {
			err = jerr
		}
	} else {
		printActions(stdout, acts)
	}
	if err != nil {
		fmt.Fprintf(stderr, "devplumbctl gc: %v\n", err)
		return 1
	}
	return 0
}

// pastTense says what was done ("removed", "ran", "kept", or with dryRun
// "would remove", "would run"); never nil.
func pastTense(acts []nodestate.GCAction, dryRun bool) []nodestate.GCAction {
	past := map[string]string{"remove": "removed", "run": "ran", "keep": "kept"}
	out := make([]nodestate.GCAction, 0, len(acts))
	for _, a := range acts {
		if dryRun && a.Verb != "keep" {
			a.Verb = "would " + a.Verb
		} else {
			a.Verb = past[a.Verb]
		}
		out = append(out, a)
	}
	return out
}

func printActions(w io.Writer, acts []nodestate.GCAction) {
	removed := 0
	for _, a := range acts {
		if a.Verb != "kept" {
			removed++
		}
		fmt.Fprintln(w, a)
	}
	if removed == 0 {
		fmt.Fprintln(w, "nothing to remove")
	}
}
