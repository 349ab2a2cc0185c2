package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Request is one call of a plugin, checked against the draft.
type Request struct {
	Command      string // upper case
	Version      string // CDI_VERSION
	Config       *Config
	RawConfig    []byte
	Resources    []Amount // ADD
	RequestID    string   // ADD, DEL
	NUMALocality []int    // ADD, nil when not asked
}

// AddResult is what a plugin's ADD hands out.
type AddResult struct {
	Devices      []string
	NUMALocality []int
}

// Plugin is the device-specific part of a CDI binary. Errors of type *Error
// keep their code; any other error becomes code 100.
type Plugin interface {
	// Info returns the available amount of the config's resource-type and
	// of any subtypes of it.
	Info(req *Request) (map[string]int64, error)
	// Add hands out the whole request or nothing.
	Add(req *Request) (*AddResult, error)
	// Del returns what req.RequestID holds; an unknown ID is error 5.
	Del(req *Request) error
}

// Handler serves the draft's commands for a Plugin.
type Handler struct {
	Plugin Plugin
	// Versions the plugin supports; default Versions.
	Versions []string
	// Supports tells whether the plugin takes a resource-spec of the
	// config's type in ADD; default: the resource-type alone.
	Supports func(cfg *Config, spec string) bool
}

// Main serves one call from the process's environment, stdin and stdout and
// exits with the draft's status.
func Main(h Handler) {
	os.Exit(h.Serve(os.Getenv, os.Stdin, os.Stdout))
}

// Serve answers one call and returns the exit status: 0 on success, 1 on
// an error, and 0 for VERSION and DEL always (the draft says they must not
// fail; DEL's error reply is for the log).
func (h Handler) Serve(env func(string) string, stdin io.Reader, stdout io.Writer) int {
	versions := h.versions()
	cmd := strings.ToUpper(env(EnvCommand))
	if cmd == CmdVersion {
		writeJSON(stdout, VersionReply{CDIVersion: versions[len(versions)-1], SupportedVersions: versions})
		return 0
	}
	raw, rerr := io.ReadAll(stdin)
	replyVersion := replyVersion(versions, env(EnvVersion), raw)
	out, err := h.handle(cmd, env, raw, rerr)
	if err != nil {
		e := asError(err)
		e.CDIVersion = replyVersion
		writeJSON(stdout, e)
		if cmd == CmdDel {
			return 0
		}
		return 1
	}
	if out != nil {
		writeJSON(stdout, out)
	}
	return 0
}

// replyVersion is the version of an error reply: the caller's when the
// plugin speaks it, else the config's (the draft's first error example
// answers an unknown CDI_VERSION in its config's 0.0.1, while the same
// binary's VERSION reply is 0.0.2), else the newest the plugin speaks.
func replyVersion(versions []string, asked string, rawConfig []byte) string {
	if slices.Contains(versions, asked) {
		return asked
	}
	var c struct {
		CDIVersion string `json:"cdiVersion"`
	}
	if json.Unmarshal(rawConfig, &c) == nil && slices.Contains(versions, c.CDIVersion) {
		return c.CDIVersion
	}
	return versions[len(versions)-1]
}

func (h Handler) versions() []string {
	if len(h.Versions) == 0 {
		return Versions
	}
	return h.Versions
}

func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		c := *e
		return &c
	}
	return &Error{Code: FirstPluginCode, Message: "Plugin error", Details: err.Error()}
}

func writeJSON(w io.Writer, v any) {
	data, err := json.Marshal(v)
	if err != nil { // only our own types are written: cannot happen
		panic(err)
	}
	w.Write(append(data, '\n'))
}

// handle checks the call and runs the command; its reply is nil for DEL.
func (h Handler) handle(cmd string, env func(string) string, rawConfig []byte, readErr error) (any, error) {
	req, err := h.parse(cmd, env, rawConfig, readErr)
	if err != nil {
		return nil, err
	}
	switch cmd {
	case CmdInfo:
		return h.info(req)
	case CmdAdd:
		return h.add(req)
	default:
		return nil, h.Plugin.Del(req)
	}
}

func (h Handler) info(req *Request) (any, error) {
	avail, err := h.Plugin.Info(req)
	if err != nil {
		return nil, err
	}
	if err := CheckInfo(req.Config.Type, avail); err != nil {
		return nil, fmt.Errorf("plugin broke the INFO rule: %w", err)
	}
	return InfoReply{CDIVersion: req.Version, Available: avail}, nil
}

func (h Handler) add(req *Request) (any, error) {
	res, err := h.Plugin.Add(req)
	if err != nil {
		return nil, err
	}
	reply := &AddReply{CDIVersion: req.Version, Devices: res.Devices, NUMALocality: res.NUMALocality}
	if reply.Devices == nil {
		reply.Devices = []string{}
	}
	if err := reply.check(); err != nil {
		return nil, fmt.Errorf("plugin broke the ADD rule: %w", err)
	}
	return reply, nil
}
