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
const ProtocolVersion = 1

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
}

// PrepareAnswer holds at most one of Delegate and Error; with neither the
// call is complete (nothing to run, nothing to commit, print nothing, exit 0:
// a DEL with nothing left to undo).
type PrepareAnswer struct {
	// Attachment names the call's record; Commit sends it back so the agent
	// needs no state of its own between the two steps.
	Attachment string       `json:"attachment,omitempty"`
	Delegate   *Delegate    `json:"delegate,omitempty"`
	Error      *types.Error `json:"error,omitempty"` // print it and exit non-zero; no commit
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
}

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
	return nil
}
