// Package plugin is the devplumb CNI meta-plugin: ADD finds the pod's device,
// takes it, hands its device information to the delegate plugins and records
// the network-status entry; DEL, CHECK, STATUS and GC follow the same path.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/base/libcnicache"
	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
	"github.com/devplumb/devplumb/podresources"
)

// devplumb's own CNI error codes (the CNI spec leaves 100+ to plugins).
const (
	ErrNoDevice       uint = 100 // the pod has no usable device of the resource
	ErrNoFreeDevice   uint = 101 // other attachments hold every device of the pod
	ErrDeviceInfo     uint = 102 // a device-info file is invalid
	ErrDelegate       uint = 103 // a delegate plugin failed
	ErrPodResources   uint = 104 // the kubelet's PodResources API failed
	ErrState          uint = 105 // devplumb's state is missing or unusable
	ErrKube           uint = 106 // the Kubernetes API failed
	ErrNoDeviceSource uint = 107 // nothing tells devplumb which device to use
	ErrShape          uint = 108 // a share's bandwidth could not be enforced on its interface
)

// Kube is what the plugin needs from the API server; nil when the config has no kubeconfig.
type Kube interface {
	SetNetworkStatus(ctx context.Context, namespace, name, uid string, entry nadv1.NetworkStatus) error
	// RemoveNetworkStatusUnless removes the entry of network and ifName unless keep (nil:
	// never), asked with every read of the pod, reports that a later ADD wrote it (a
	// removal that runs after DEL answered: Plugin.Later).
	RemoveNetworkStatusUnless(ctx context.Context, namespace, name, uid, network, ifName string, keep func() bool) error
	NADResourceName(ctx context.Context, namespace, name string) (string, error)
}

// Plugin holds what does not come from a CNI call.
type Plugin struct {
	Log     *slog.Logger
	Timeout time.Duration
	// NodeConfig is the node config file (pkg/cni/nodeconfig), read by each
	// call: the node's paths and credential, which no network config sets.
	// Empty: the file $DEVPLUMB_NODE_CONFIG names, else the default.
	NodeConfig string
	// NodeConfigs, when set, keeps the node config between calls, read
	// again when its file changes (a process serving many calls: the agent).
	NodeConfigs *nodeconfig.Cache
	// Configs, when set, keeps the network configs that parsed, for the
	// calls that bring the same bytes again (the agent).
	Configs *config.Cache
	// LogTo, when set, is where each call logs, at its network's logLevel
	// and to its logFile (config logLevel, logFile, logToStderr); unset,
	// every call logs through Log.
	LogTo io.Writer
	// NewKube builds the Kubernetes client for a config's kubeconfig,
	// logging through log; cmd/devplumb passes pkg/cni/kube's.
	NewKube func(kubeconfig string, timeout time.Duration, log *slog.Logger) (Kube, error)
	// EventTimeout bounds the Event an ADD records on the pod (config
	// "events"); 0 is DefaultEventTimeout.
	EventTimeout time.Duration
	// PodResources, when set, gives a call its PodResources client for the
	// socket and release, called when the call is done with it: the node
	// agent shares one connection per socket. Unset, each call dials its own.
	PodResources func(socket string, timeout time.Duration, log *slog.Logger) (*podresources.Client, func(), error)
	// Phases, when set, gets each ADD's and DEL's phase timings (the node
	// agent's histograms); unset, they go to the phase spool, if one is kept.
	Phases func(phasespool.Record)
	// Exec runs the delegates (libcni's invoke.Exec); nil runs the plugin binaries found
	// on CNI_PATH. Tests stand in for a delegate with it.
	Exec invoke.Exec
	// Later, when set, takes DEL's network-status removal to run after DEL
	// has answered (the node agent's: its process outlives the call); unset,
	// DEL removes before it returns, as devplumb-direct must.
	Later WriteQueue
	// Go, when set, runs a call's work aside (the lookahead Get, the API
	// writes ADD waits for): the node agent's warm goroutines, whose stacks
	// need not grow again on every call. Unset, each runs on a new goroutine.
	Go func(func())
}

// kubeletClient is a call's PodResources client of socket, made as this
// plugin makes them (shared by the agent, its work aside on Go).
func (p *Plugin) kubeletClient(socket string) *kubeletClient {
	return &kubeletClient{socket: socket, timeout: p.Timeout, log: p.Log, shared: p.PodResources, spawn: p.Go}
}

// aside runs f on spawn (Plugin.Go), or on a new goroutine when spawn is nil.
func aside(spawn func(func()), f func()) {
	if spawn == nil {
		go f()
		return
	}
	spawn(f)
}

// WriteQueue runs API server writes after the call that asked for them has
// answered, in order per key (a pod).
type WriteQueue interface {
	// Defer runs write once the writes taken before for any of keys are
	// done; false: it took none, and the caller writes now.
	Defer(keys []string, write func()) bool
	// Await waits until the writes taken so far for keys are done, or ctx
	// ends.
	Await(ctx context.Context, keys []string)
}

// New returns a plugin logging to stderr (stdout carries the CNI result).
func New() *Plugin {
	level := slog.LevelWarn
	if os.Getenv("DEVPLUMB_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return &Plugin{
		Log:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		LogTo:   os.Stderr,
		Timeout: podresources.DefaultTimeout, // the API server gets the kubelet's bound too
	}
}

// Funcs are the CNI commands for skel.PluginMainFuncs.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, Status: p.Status, GC: p.GC}
}

// cniError builds the CNI error JSON: msg says what to fix, details the cause.
func cniError(code uint, msg string, err error) *types.Error {
	details := ""
	if err != nil {
		details = err.Error()
	}
	return types.NewError(code, msg, details)
}

// delegateError keeps a delegate's CNI spec code (1-99), so the runtime sees
// why. A delegate's own code (100+) means something only in that plugin's
// numbering and would read as one of devplumb's: it becomes 103, with the
// delegate's code in the message.
func delegateError(what string, err error) *types.Error {
	var te *types.Error
	if !errors.As(err, &te) || te.Code == 0 {
		return cniError(ErrDelegate, what, err)
	}
	if te.Code >= 100 {
		return types.NewError(ErrDelegate, fmt.Sprintf("%s: delegate error code %d: %s", what, te.Code, te.Msg), err.Error())
	}
	return types.NewError(te.Code, fmt.Sprintf("%s: %s", what, te.Msg), err.Error())
}

// call is one CNI invocation: its parsed inputs and what serves them. What
// a step of ADD or DEL finds out (the candidate devices, the taken record,
// the chain's prevResult, the delegates' result) is not kept here: each step
// returns it and the next takes it.
type call struct {
	plugin *Plugin
	log    *slog.Logger // the network's logger (forCall)
	args   *skel.CmdArgs
	conf   *config.NetConf
	pod    attachment.Pod
	key    attachment.Key
	// cniArgs are CNI_ARGS as the delegates get them.
	cniArgs    [][2]string
	deviceInfo *devinfo.Store
	copied     copiedFile // the CNI device-info file as this ADD copied it
	names      *names
	records    *attachment.Store
	delegates  *delegate.Invoker
	// kubelet is the call's PodResources client, opened on first use and
	// closed by close. It and the Kubernetes client (apiClient) are made
	// once per call and shared by devices and status, so that what one step
	// read another can use (network-status starts from the pod object the
	// DRA lookup read).
	kubelet *kubeletClient
	// devices finds the attachment's device (ADD step 2) and judges holders.
	devices *finder
	// status writes and removes the attachment's entries on the API server.
	status *statusWriter
	timing *phases // timings of the call's steps
	depth  int     // devplumb runs above this one (DepthEnv)
	// closeLog ends the call's log file, if its network has one.
	closeLog func()
}

// copiedFile is a device-info file's bytes and what they parse to.
type copiedFile struct {
	data []byte
	info *devinfo.DeviceInfo
}

// callStart is how a call begins: its phase timing and the node config,
// loaded once per call (a fresh ADD needs the node's kubelet socket before
// the call is built: getAhead).
type callStart struct {
	timing  *phases
	node    *nodeconfig.Node
	nodeErr error
}

func (p *Plugin) startCall() callStart {
	timing := startPhases()
	load := nodeconfig.Load
	if p.NodeConfigs != nil {
		load = p.NodeConfigs.Load
	}
	node, err := load(p.nodeConfig())
	return callStart{timing: timing, node: node, nodeErr: err}
}

func (p *Plugin) newCall(args *skel.CmdArgs, strictArgs bool) (*call, *types.Error) {
	return p.newCallFrom(p.startCall(), args, strictArgs)
}

// newCallFrom builds the call begun by start.
func (p *Plugin) newCallFrom(start callStart, args *skel.CmdArgs, strictArgs bool) (*call, *types.Error) {
	conf, pod, cerr := p.parseInputs(start, args, strictArgs)
	if cerr != nil {
		return nil, cerr
	}
	records := attachment.New(conf.StateDir)
	delegates, err := p.invoker(args.Path, records, conf.Name)
	if err != nil {
		return nil, cniError(ErrState, "unusable \"stateDir\" "+conf.StateDir, err)
	}
	own := *args // DEL may clear Netns; the caller's args stay as given
	p, closeLog := p.forCall(conf)
	deviceInfo := devinfo.NewStore(conf.DeviceInfoDir)
	key := attachment.Key{Network: conf.Name, ContainerID: args.ContainerID, IfName: args.IfName}
	kubelet := p.kubeletClient(conf.PodResourcesSocket)
	api := &apiClient{make: func() (Kube, error) { return p.newKube(conf) }}
	return &call{
		plugin: p, log: p.Log, args: &own, closeLog: closeLog, conf: conf, pod: pod,
		key:        key,
		cniArgs:    libcnicache.SplitArgs(args.Args),
		deviceInfo: deviceInfo,
		names:      &names{conf: conf, podNamespace: pod.Namespace, containerID: args.ContainerID, ifName: args.IfName, deviceInfo: deviceInfo},
		records:    records,
		delegates:  delegates,
		kubelet:    kubelet,
		devices: &finder{conf: conf, pod: pod, key: key, records: records, kubelet: kubelet, api: api,
			timeout: p.Timeout, log: p.Log},
		status: &statusWriter{api: api, conf: conf, pod: pod, ifName: args.IfName, timeout: p.Timeout, log: p.Log, spawn: p.Go,
			later: p.Later},
		depth:  markDepth(),
		timing: start.timing.mark(phaseConfig),
	}, nil
}

// parseInputs parses the network config (with the node config start
// loaded) and the pod identity in CNI_ARGS; with strictArgs, CNI_ARGS that
// do not parse fail the call.
func (p *Plugin) parseInputs(start callStart, args *skel.CmdArgs, strictArgs bool) (*config.NetConf, attachment.Pod, *types.Error) {
	if start.nodeErr != nil {
		return nil, attachment.Pod{}, cniError(types.ErrInvalidNetworkConfig, "invalid devplumb node config: "+start.nodeErr.Error(), nil)
	}
	parse := config.Parse
	if p.Configs != nil {
		parse = p.Configs.Parse
	}
	conf, err := parse(args.StdinData, start.node)
	if err != nil {
		code := types.ErrInvalidNetworkConfig
		if errors.Is(err, config.ErrDecode) {
			code = types.ErrDecodingFailure
		}
		return nil, attachment.Pod{}, cniError(code, "invalid devplumb network config: "+err.Error(), nil)
	}
	pod, err := podFromArgs(args.Args)
	if err != nil {
		if strictArgs {
			return nil, attachment.Pod{}, cniError(types.ErrInvalidEnvironmentVariables, "invalid CNI_ARGS: "+err.Error()+
				" (add IgnoreUnknown=1 to pass keys devplumb does not know)", nil)
		}
		p.Log.Warn("ignoring unparsable CNI_ARGS", "err", err)
	}
	return conf, pod, nil
}

// getAhead starts a fresh ADD's PodResources Get of its pod, on the
// kubelet of the node config start loaded, before the call parses its
// config (kubeletClient.getAhead says why); nil when the node config or
// CNI_ARGS do not name the kubelet and the pod, which the call itself then
// reports; nil as well when the node trusts explicit device IDs and the
// config names one, as that call never takes the answer (trustedDeviceID).
func (p *Plugin) getAhead(start callStart, args *skel.CmdArgs) *kubeletClient {
	node := start.node
	if start.nodeErr != nil || (node.TrustDeviceID && trustedDeviceID(args.StdinData)) {
		return nil
	}
	pod, err := podFromArgs(args.Args)
	if err != nil || !pod.Known() {
		return nil
	}
	k := p.kubeletClient(node.PodResourcesSocket)
	k.getAhead(pod.Namespace, pod.Name)
	return k
}

// trustedDeviceID tells whether the network config names its device ID
// (config.NetConf.DeviceIDFromConfig), which a node trusting explicit IDs
// takes without asking the kubelet: a Get for it would only spend the
// kubelet's rate limit. Only those keys are read here; a config that does
// not decode says no, and the call itself reports it.
func trustedDeviceID(stdin []byte) bool {
	var keys struct {
		ResourceClaim string               `json:"resourceClaim"`
		DeviceID      string               `json:"deviceID"`
		RuntimeConfig config.RuntimeConfig `json:"runtimeConfig"`
	}
	if json.Unmarshal(stdin, &keys) != nil {
		return false
	}
	c := config.NetConf{ResourceClaim: keys.ResourceClaim, DeviceID: keys.DeviceID, RuntimeConfig: keys.RuntimeConfig}
	return c.DeviceIDFromConfig() != ""
}

// nodeConfig is the node config file this plugin reads.
func (p *Plugin) nodeConfig() string {
	if p.NodeConfig != "" {
		return p.NodeConfig
	}
	return nodeconfig.Path()
}

// invoker runs delegates with one libcni cache per devplumb network: GC of
// one network must never see (and DEL) another network's delegates, even if
// they share a name. The cache directory is checked like all of stateDir (the
// records' store checks it): libcni writes and removes results there.
func (p *Plugin) invoker(cniPath string, records *attachment.Store, network string) (*delegate.Invoker, error) {
	dir, err := records.Subdir(filepath.Join("libcni", network))
	if err != nil {
		return nil, fmt.Errorf("delegate cache: %w", err)
	}
	return delegate.NewWithExec(cniPath, dir, p.Exec), nil
}

// k8sArgs are the pod identity keys runtimes put in CNI_ARGS.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_UID                types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive // CNI_ARGS key
}

func podFromArgs(s string) (attachment.Pod, error) {
	a := k8sArgs{}
	if err := types.LoadArgs(s, &a); err != nil {
		return attachment.Pod{}, err
	}
	return attachment.Pod{Namespace: string(a.K8S_POD_NAMESPACE), Name: string(a.K8S_POD_NAME), UID: string(a.K8S_POD_UID)}, nil
}

// buildList is the delegate conflist with dev injected ("" injects nothing).
func (c *call) buildList(dev string) (*libcni.NetworkConfigList, *types.Error) {
	list, err := delegate.BuildList(c.conf, dev)
	if err != nil {
		return nil, cniError(types.ErrInvalidNetworkConfig, `invalid delegate config: fix "delegate" (or "delegates")`, err)
	}
	return list, nil
}

// ownedCNIFile returns path when devplumb may remove it: a file directly in
// one of the device-info directories. A path from state that is not (edited
// by hand, or from a config with another deviceInfoDir) is left alone.
func (c *call) ownedCNIFile(path string) string {
	if path == "" {
		return ""
	}
	if err := config.CheckCNIDeviceInfoFile("recorded CNI device-info file", path, c.conf.CNIDeviceInfoDirs()); err != nil {
		c.log.Warn("leaving a file devplumb does not own", "err", err)
		return ""
	}
	return path
}

func (c *call) ctx() (context.Context, context.CancelFunc) {
	return timeoutCtx(c.plugin.Timeout)
}

// timeoutCtx bounds one request to the kubelet or the API server.
func timeoutCtx(t time.Duration) (context.Context, context.CancelFunc) {
	if t <= 0 {
		t = podresources.DefaultTimeout
	}
	return context.WithTimeout(context.Background(), t)
}

// newKube builds the Kubernetes client of conf's kubeconfig; nil without one.
func (p *Plugin) newKube(conf *config.NetConf) (Kube, error) {
	if conf.Kubeconfig == "" {
		return nil, nil
	}
	if p.NewKube == nil {
		return nil, errors.New("this devplumb build has no Kubernetes client")
	}
	// Credentials and server come from this file: one a NAD author wrote
	// would point devplumb at their own API server.
	if err := safefile.CheckOwnedFile(conf.Kubeconfig); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("refusing kubeconfig: %w", err)
	}
	return p.NewKube(conf.Kubeconfig, p.Timeout, p.Log)
}

func (c *call) close() {
	if c.closeLog != nil {
		c.closeLog()
		c.closeLog = nil
	}
	c.kubelet.close()
}
