package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/kubeletsim/prserver"
	"github.com/devplumb/devplumb/pkg/resname"
)

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, with the usage, by exitCode
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return commandHelp(fs)
		}
		return fmt.Errorf("%w: %s: %v", errUsage, fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected argument %q", errUsage, fs.Name(), fs.Arg(0))
	}
	return nil
}

// helpRequested carries a command's own help; it is printed on stdout and
// the exit status is 0.
type helpRequested struct{ text string }

func (h *helpRequested) Error() string { return h.text }

func commandHelp(fs *flag.FlagSet) error {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: nodesim %s [flags]\n", fs.Name())
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return &helpRequested{b.String()}
}

func required(fs *flag.FlagSet, names ...string) error {
	for _, n := range names {
		if fs.Lookup(n).Value.String() == "" {
			return fmt.Errorf("%w: %s: --%s is required", errUsage, fs.Name(), n)
		}
	}
	return nil
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("serve")
	root := fs.String("root", "", "kubelet root directory")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	get := fs.String("podresources-get", "enabled", "how PodResources Get answers: enabled, disabled (gate off) or unimplemented")
	qps := fs.Float64("podresources-qps", prserver.DefaultQPS, "PodResources rate limit, calls per second for all clients")
	burst := fs.Int("podresources-burst", prserver.DefaultBurst, "PodResources rate limit burst")
	grace := fs.Duration("plugin-grace-period", kubeletsim.DefaultPluginGracePeriod,
		"how long a dead plugin's devices stay listed (unhealthy) before they are dropped")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := required(fs, "root"); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("%w: serve: --log-level %q: %v", errUsage, *level, err)
	}
	cfg := prserver.Config{QPS: *qps, Burst: *burst}
	switch *get {
	case "enabled":
	case "disabled":
		cfg.GetMode = prserver.GetDisabled
	case "unimplemented":
		cfg.GetMode = prserver.GetUnimplemented
	default:
		return fmt.Errorf("%w: serve: --podresources-get %q: want enabled, disabled or unimplemented", errUsage, *get)
	}
	if *qps <= 0 || *burst <= 0 {
		return fmt.Errorf("%w: serve: --podresources-qps and --podresources-burst must be positive", errUsage)
	}
	if *grace <= 0 {
		return fmt.Errorf("%w: serve: --plugin-grace-period %v must be positive", errUsage, *grace)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	node, err := kubeletsim.StartWithOptions(ctx, *root, log, kubeletsim.Options{PodResources: cfg, PluginGracePeriod: *grace})
	if err != nil {
		return err
	}
	<-ctx.Done()
	node.Stop()
	return nil
}

// containerFlag collects repeated --container NAME=RES:COUNT[,RES:COUNT].
type containerFlag []kubeletsim.ContainerSpec

func (c *containerFlag) String() string { return fmt.Sprint(len(*c)) }

func (c *containerFlag) Set(v string) error {
	spec, err := parseContainer(v)
	if err != nil {
		return err
	}
	*c = append(*c, spec)
	return nil
}

// parseContainer reads NAME=RES:COUNT[,RES:COUNT]...; a bare NAME (or NAME=)
// is a container without device requests.
func parseContainer(v string) (kubeletsim.ContainerSpec, error) {
	name, reqs, _ := strings.Cut(v, "=")
	if name == "" {
		return kubeletsim.ContainerSpec{}, fmt.Errorf("%q: container name missing (want NAME=RES:COUNT[,RES:COUNT])", v)
	}
	spec := kubeletsim.ContainerSpec{Name: name}
	if reqs == "" {
		return spec, nil
	}
	for _, r := range strings.Split(reqs, ",") {
		i := strings.LastIndex(r, ":")
		if i <= 0 {
			return spec, fmt.Errorf("%q: request %q is not RES:COUNT", v, r)
		}
		n, err := strconv.Atoi(r[i+1:])
		if err != nil || n < 1 {
			return spec, fmt.Errorf("%q: count in %q must be a positive integer", v, r)
		}
		if err := resname.Validate(r[:i]); err != nil {
			return spec, fmt.Errorf("%q: %w", v, err)
		}
		spec.Requests = append(spec.Requests, kubeletsim.ResourceRequest{Resource: r[:i], Count: n})
	}
	return spec, nil
}

func podAdd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("pod add")
	root := fs.String("root", "", "kubelet root directory of a running nodesim serve")
	ns := fs.String("namespace", "", "pod namespace")
	name := fs.String("name", "", "pod name")
	uid := fs.String("uid", "", "pod UID (generated when empty)")
	var ctrs containerFlag
	fs.Var(&ctrs, "container", "NAME=RES:COUNT[,RES:COUNT]... (repeat for more containers)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := required(fs, "root", "namespace", "name"); err != nil {
		return err
	}
	if len(ctrs) == 0 {
		return fmt.Errorf("%w: pod add: at least one --container is required", errUsage)
	}
	c, err := kubeletsim.NewControlClient(*root)
	if err != nil {
		return err
	}
	alloc, err := c.AddPod(ctx, kubeletsim.PodSpec{Namespace: *ns, Name: *name, UID: *uid, Containers: ctrs})
	if err != nil {
		return err
	}
	return printJSON(stdout, alloc)
}

func podDel(ctx context.Context, args []string) error {
	fs := newFlags("pod del")
	root := fs.String("root", "", "kubelet root directory of a running nodesim serve")
	ns := fs.String("namespace", "", "pod namespace")
	name := fs.String("name", "", "pod name")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := required(fs, "root", "namespace", "name"); err != nil {
		return err
	}
	c, err := kubeletsim.NewControlClient(*root)
	if err != nil {
		return err
	}
	return c.DelPod(ctx, *ns, *name)
}

func listPods(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := controlFromRoot("pods", args)
	if err != nil {
		return err
	}
	pods, err := c.Pods(ctx)
	if err != nil {
		return err
	}
	if pods == nil {
		pods = []kubeletsim.PodAllocation{}
	}
	return printJSON(stdout, pods)
}

func listResources(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := controlFromRoot("resources", args)
	if err != nil {
		return err
	}
	res, err := c.Resources(ctx)
	if err != nil {
		return err
	}
	return printJSON(stdout, res)
}

func wait(ctx context.Context, args []string) error {
	fs := newFlags("wait")
	root := fs.String("root", "", "kubelet root directory of a running nodesim serve")
	res := fs.String("resource", "", "extended resource name, e.g. example.com/vf")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := required(fs, "root", "resource"); err != nil {
		return err
	}
	c, err := kubeletsim.NewControlClient(*root)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := c.WaitRegistered(ctx, *res); err != nil {
		return fmt.Errorf("device plugin %s not registered: %w", *res, err)
	}
	return nil
}

func controlFromRoot(cmd string, args []string) (*kubeletsim.ControlClient, error) {
	fs := newFlags(cmd)
	root := fs.String("root", "", "kubelet root directory of a running nodesim serve")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if err := required(fs, "root"); err != nil {
		return nil, err
	}
	return kubeletsim.NewControlClient(*root)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
