package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devplumb/devplumb/pkg/base/logging"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
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
	logFlags := logging.Register(fs)
	get := fs.String("podresources-get", "enabled", "how PodResources Get answers: enabled, disabled (gate off) or unimplemented")
	qps := fs.Float64("podresources-qps", podresourcesserver.DefaultQPS, "PodResources rate limit, calls per second for all clients")
	burst := fs.Int("podresources-burst", podresourcesserver.DefaultBurst, "PodResources rate limit burst")
	grace := fs.Duration("plugin-grace-period", kubeletsim.DefaultPluginGracePeriod,
		"how long a dead plugin's devices stay listed (unhealthy) before they are dropped")
	kubeconfig := fs.String("kubeconfig", "", "API server for DRA: pods with claims, DRA plugins in DIR/plugins_registry")
	nodeName := fs.String("node-name", "", "this node's name in the API server (required with --kubeconfig)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := required(fs, "root"); err != nil {
		return err
	}
	log, err := logFlags.New(stderr)
	if err != nil {
		return fmt.Errorf("%w: serve: %v", errUsage, err)
	}
	cfg := podresourcesserver.Config{QPS: *qps, Burst: *burst}
	switch *get {
	case "enabled":
	case "disabled":
		cfg.GetMode = podresourcesserver.GetDisabled
	case "unimplemented":
		cfg.GetMode = podresourcesserver.GetUnimplemented
	default:
		return fmt.Errorf("%w: serve: --podresources-get %q: want enabled, disabled or unimplemented", errUsage, *get)
	}
	if *qps <= 0 || *burst <= 0 {
		return fmt.Errorf("%w: serve: --podresources-qps and --podresources-burst must be positive", errUsage)
	}
	if *grace <= 0 {
		return fmt.Errorf("%w: serve: --plugin-grace-period %v must be positive", errUsage, *grace)
	}
	dra, err := draOptions(*kubeconfig, *nodeName)
	if err != nil {
		return err
	}
	node, err := kubeletsim.StartWithOptions(ctx, *root, log, kubeletsim.Options{PodResources: cfg, PluginGracePeriod: *grace, DRA: dra})
	if err != nil {
		return err
	}
	<-ctx.Done()
	node.Stop()
	return nil
}

// draOptions builds the API client for DRA; no kubeconfig, no DRA.
func draOptions(kubeconfig, nodeName string) (*kubeletsim.DRAOptions, error) {
	if kubeconfig == "" {
		if nodeName != "" {
			return nil, fmt.Errorf("%w: serve: --node-name needs --kubeconfig", errUsage)
		}
		return nil, nil
	}
	if errs := validation.IsDNS1123Subdomain(nodeName); nodeName == "" || len(errs) > 0 {
		return nil, fmt.Errorf("%w: serve: --kubeconfig needs --node-name, a valid node name (got %q)", errUsage, nodeName)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return &kubeletsim.DRAOptions{Client: client, NodeName: nodeName}, nil
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

// parseContainer reads NAME=ITEM[,ITEM]... where an ITEM is RES:COUNT,
// claim:PODCLAIM[/REQUEST] (resource names are domain-qualified, so "claim"
// is none), or the word init or sidecar (an init container, one that keeps
// running); a bare NAME (or NAME=) is a container without device requests.
func parseContainer(v string) (kubeletsim.ContainerSpec, error) {
	name, reqs, _ := strings.Cut(v, "=")
	if name == "" {
		return kubeletsim.ContainerSpec{}, fmt.Errorf("%q: container name missing (want NAME=RES:COUNT[,RES:COUNT][,claim:PODCLAIM])", v)
	}
	spec := kubeletsim.ContainerSpec{Name: name}
	if reqs == "" {
		return spec, nil
	}
	for _, r := range strings.Split(reqs, ",") {
		if r == "init" || r == "sidecar" {
			spec.Init, spec.Sidecar = true, spec.Sidecar || r == "sidecar"
			continue
		}
		if claim, ok := strings.CutPrefix(r, "claim:"); ok {
			if claim == "" {
				return spec, fmt.Errorf("%q: %q names no pod claim", v, r)
			}
			spec.Claims = append(spec.Claims, claim)
			continue
		}
		i := strings.LastIndex(r, ":")
		if i <= 0 {
			return spec, fmt.Errorf("%q: request %q is not RES:COUNT", v, r)
		}
		n, err := strconv.Atoi(r[i+1:])
		if err != nil || n < 1 {
			return spec, fmt.Errorf("%q: count in %q must be a positive integer", v, r)
		}
		if err := kubeletsim.ValidateRequestName(r[:i]); err != nil {
			return spec, fmt.Errorf("%q: %w", v, err)
		}
		spec.Requests = append(spec.Requests, kubeletsim.ResourceRequest{Resource: r[:i], Count: n})
	}
	return spec, nil
}

// claimFlag collects repeated --claim PODCLAIM=claim:NAME|template:NAME.
type claimFlag []kubeletsim.PodClaim

func (c *claimFlag) String() string { return fmt.Sprint(len(*c)) }

func (c *claimFlag) Set(v string) error {
	name, src, _ := strings.Cut(v, "=")
	kind, obj, _ := strings.Cut(src, ":")
	if name == "" || obj == "" {
		return fmt.Errorf("%q: want PODCLAIM=claim:NAME or PODCLAIM=template:NAME", v)
	}
	pc := kubeletsim.PodClaim{Name: name}
	switch kind {
	case "claim":
		pc.ResourceClaimName = obj
	case "template":
		pc.ResourceClaimTemplateName = obj
	default:
		return fmt.Errorf("%q: %q is neither claim: nor template:", v, kind)
	}
	*c = append(*c, pc)
	return nil
}

func podAdd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("pod add")
	root := fs.String("root", "", "kubelet root directory of a running nodesim serve")
	ns := fs.String("namespace", "", "pod namespace")
	name := fs.String("name", "", "pod name")
	uid := fs.String("uid", "", "pod UID (generated when empty)")
	var ctrs containerFlag
	fs.Var(&ctrs, "container", "NAME=RES:COUNT[,RES:COUNT]...[,claim:PODCLAIM[/REQUEST]]...[,init|,sidecar] (repeat for more containers)")
	var claims claimFlag
	fs.Var(&claims, "claim", "PODCLAIM=claim:NAME or PODCLAIM=template:NAME: a pod-spec resource claim (repeat for more)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := required(fs, "root", "namespace", "name"); err != nil {
		return err
	}
	if len(ctrs) == 0 && len(claims) == 0 {
		return fmt.Errorf("%w: pod add: at least one --container (or --claim) is required", errUsage)
	}
	c, err := kubeletsim.NewControlClient(*root)
	if err != nil {
		return err
	}
	alloc, err := c.AddPod(ctx, kubeletsim.PodSpec{Namespace: *ns, Name: *name, UID: *uid, Containers: ctrs, Claims: claims})
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

func listDrivers(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := controlFromRoot("drivers", args)
	if err != nil {
		return err
	}
	drivers, err := c.DRADrivers(ctx)
	if err != nil {
		return err
	}
	return printJSON(stdout, drivers)
}

func wait(ctx context.Context, args []string) error {
	fs := newFlags("wait")
	root := fs.String("root", "", "kubelet root directory of a running nodesim serve")
	res := fs.String("resource", "", "extended resource name, e.g. example.com/vf")
	driver := fs.String("driver", "", "DRA driver name, e.g. netdev.devplumb.io (instead of --resource)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := required(fs, "root"); err != nil {
		return err
	}
	if (*res == "") == (*driver == "") {
		return fmt.Errorf("%w: wait: give one of --resource and --driver", errUsage)
	}
	// The timeout covers a nodesim still starting too: a script starts
	// `nodesim serve` and its plugin, then waits here for both.
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := kubeletsim.WaitControlClient(ctx, *root)
	if err != nil {
		return err
	}
	if *driver != "" {
		if err := c.WaitDRADriver(ctx, *driver); err != nil {
			return fmt.Errorf("DRA driver %s not registered: %w", *driver, err)
		}
		return nil
	}
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
