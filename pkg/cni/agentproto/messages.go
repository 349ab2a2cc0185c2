package agentproto

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
)

// ProtocolVersion is the version both sides send in Hello. Bump it on any
// change of the messages' meaning: a skewed pair then falls back to
// devplumb-direct instead of misreading each other. Hello's shape never
// changes, so that every version can still tell the other which it speaks.
const ProtocolVersion = 3

// Hello opens a connection (entry point -> agent) and answers it (agent ->
// entry point).
type Hello struct {
	Protocol int    `json:"protocol"`
	Build    string `json:"build"` // the binary's build version, for logs of a skew
}

// CNI commands a Prepare may carry; VERSION, STATUS and GC the entry point
// answers or runs itself.
const (
	CmdAdd   = "ADD"
	CmdDel   = "DEL"
	CmdCheck = "CHECK"
)

// An ADD's hello goes with a lookahead (DialAdd): the Prepare the entry point
// sends once the hello is answered. The lookahead is not answered, and the
// agent may only start with it what the prepare will read (the pod's
// PodResources Get), never what it takes or writes: an entry point that
// gets no hello answer in time falls back without sending the prepare.

// Prepare asks the agent to do everything of a CNI call up to the delegate.
// The fields are the CNI_* variables and stdin as the CNI skel gives them.
type Prepare struct {
	Command     string `json:"command"` // CmdAdd, CmdDel or CmdCheck
	ContainerID string `json:"containerID"`
	Netns       string `json:"netns,omitempty"` // empty on a DEL of a gone netns
	IfName      string `json:"ifName"`
	Args        string `json:"args,omitempty"` // CNI_ARGS, unparsed
	Path        string `json:"path,omitempty"` // CNI_PATH, where the delegates are
	// StdinData is the network config as the runtime gave it: bytes (base64
	// in JSON), since a malformed config must reach the agent to be reported.
	StdinData []byte `json:"stdinData"`
	// NodeConfig is the node config file the entry point reads
	// (nodeconfig.Path() in its environment): the agent serves only calls
	// whose node config is its own, whose settings the entry point checks
	// the answer against.
	NodeConfig string `json:"nodeConfig,omitempty"`
}

// PrepareAnswer holds at most one of Delegate, Error and Result; with none
// the call is complete (nothing to run, nothing to commit, print nothing,
// exit 0: a DEL with nothing left to undo).
type PrepareAnswer struct {
	// Attachment names the prepared call; Commit (and Rollback) send it back.
	Attachment string       `json:"attachment,omitempty"`
	Delegate   *Delegate    `json:"delegate,omitempty"`
	Error      *types.Error `json:"error,omitempty"` // print it and exit non-zero; no commit
	// Result is a complete call's output (a repeated ADD answered with the
	// result it had): print it and exit 0; nothing to run, no commit.
	Result []byte `json:"result,omitempty"`
}

// Delegate is what the entry point runs (libcni) with the command and the
// CNI_* arguments it received, then reports with Commit.
type Delegate struct {
	// ConfList is the delegate network config list with the device injected.
	ConfList []byte `json:"confList"`
	// CapabilityArgs is the runtime config (libcni RuntimeConf.CapabilityArgs):
	// deviceID and CNIDeviceInfoFile, plus every runtimeConfig key devplumb
	// received. libcni passes each only to plugins declaring it.
	CapabilityArgs map[string]any `json:"capabilityArgs,omitempty"`
	// Runtime, when set, is the rest of libcni's RuntimeConf to run the
	// delegates with instead of the entry point's own CNI_* arguments: a
	// DEL of a netns already gone runs with none, and DEL of an ADD runs
	// with what the ADD recorded. Unset (an agent before it): the entry
	// point's own.
	Runtime *Runtime `json:"runtime,omitempty"`
	// CacheDir, when set, is libcni's result cache for the delegates
	// (RuntimeConf.CacheDir): the network's own, where DEL, CHECK and GC of
	// devplumb-direct look for what this run leaves.
	CacheDir string `json:"cacheDir,omitempty"`
	// Shape, for a share of a shared device, is the rate the entry point
	// sets on the interface once the delegates' ADD succeeded (pkg/cni/shape),
	// and undoes as a failed ADD when it cannot; after the delegates' DEL
	// (a DEL's or an undo's) it removes the share's ifb. Unset: not a share.
	Shape *Shape `json:"shape,omitempty"`
}

// Shape is a share's rate (pkg/cni/shape.Spec on the wire).
type Shape struct {
	Share string `json:"share"` // the claim and share ID, for errors
	Rate  uint64 `json:"rate"`  // bit/s, both ways
}

// Runtime is libcni's RuntimeConf without what Delegate carries already.
type Runtime struct {
	ContainerID string      `json:"containerID"`
	NetNS       string      `json:"netns,omitempty"`
	IfName      string      `json:"ifName"`
	Args        [][2]string `json:"args,omitempty"` // CNI_ARGS as key-value pairs
}

// Commit reports the delegate's outcome: Result on success (empty for DEL
// and CHECK), else Error.
type Commit struct {
	Attachment string       `json:"attachment"`
	Result     []byte       `json:"result,omitempty"` // the delegate's stdout, unparsed
	Error      *types.Error `json:"error,omitempty"`
}

// CommitAnswer is what the entry point prints: Result (may be empty) and exit
// 0, or Error and exit non-zero.
type CommitAnswer struct {
	Result []byte       `json:"result,omitempty"`
	Error  *types.Error `json:"error,omitempty"`
	// Undo (ADD only, always with Error) says the agent could not finish an
	// ADD whose delegates succeeded (network-status required and refused,
	// say) and still holds the device for them. The entry point must run the
	// delegates' DEL of the same Delegate (same config list, runtime and
	// cache), then send Rollback with that DEL's error, if any, and in any
	// case print Error and exit non-zero. Until Rollback the device is
	// neither freed nor given to another attachment: the rule is that
	// whoever runs a delegate ADD runs the DEL undoing it before the device
	// is freed. An entry point that cannot (it dies, the agent is gone)
	// leaves the record holding the device until the runtime's DEL after the
	// failed ADD (or gc) runs the delegates' DEL and frees it; an agent
	// waiting for a Rollback that never comes gives the call up after its
	// pending time.
	Undo bool `json:"undo,omitempty"`
}

// Rollback follows a CommitAnswer with Undo, once the entry point ran the
// delegates' DEL: Error is that DEL's error (nil when it succeeded). The
// agent frees the device either way, as devplumb-direct does after its own
// undo: a DEL that failed is logged, not retried.
type Rollback struct {
	Attachment string       `json:"attachment"`
	Error      *types.Error `json:"error,omitempty"`
}

// RollbackAnswer acknowledges a Rollback: the CNI device-info file is gone
// and the device free. The entry point prints the commit's Error.
type RollbackAnswer struct{}

// check rejects a Prepare the agent cannot act on before the handler sees it.
func (p *Prepare) check() error {
	switch p.Command {
	case CmdAdd, CmdDel, CmdCheck:
	default:
		return fmt.Errorf("prepare: command %q, want %s, %s or %s", p.Command, CmdAdd, CmdDel, CmdCheck)
	}
	if p.ContainerID == "" || p.IfName == "" {
		return errors.New("prepare: containerID and ifName are required")
	}
	return nil
}

// check rejects an answer the entry point could not act on unambiguously.
func (a *PrepareAnswer) check() error {
	switch {
	case a.Delegate != nil && a.Error != nil:
		return errors.New("prepare answer holds both a delegate and an error")
	case a.Delegate != nil && a.Attachment == "":
		return errors.New("prepare answer holds a delegate but no attachment to commit")
	case a.Delegate != nil && len(a.Delegate.ConfList) == 0:
		return errors.New("prepare answer holds a delegate with no config list")
	case len(a.Result) > 0 && (a.Delegate != nil || a.Error != nil):
		return errors.New("prepare answer holds a result to print and a delegate or an error")
	}
	return nil
}

func (c *Commit) check() error {
	if c.Attachment == "" {
		return errors.New("commit: attachment is required")
	}
	if len(c.Result) > 0 && c.Error != nil {
		return errors.New("commit: holds both a result and an error")
	}
	return nil
}

func (a *CommitAnswer) check() error {
	if len(a.Result) > 0 && a.Error != nil {
		return errors.New("commit answer holds both a result and an error")
	}
	if a.Undo && a.Error == nil {
		return errors.New("commit answer asks for an undo but holds no error")
	}
	return nil
}

func (r *Rollback) check() error {
	if r.Attachment == "" {
		return errors.New("rollback: attachment is required")
	}
	return nil
}

func (a *RollbackAnswer) check() error { return nil }
