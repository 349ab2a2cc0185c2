package protocol

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// DefaultTimeout bounds one call of a binary.
const DefaultTimeout = 30 * time.Second

// maxOutput bounds what is kept of a binary's stdout and stderr.
const maxOutput = 1 << 20

// Binary is the caller's side: one plugin binary with one config.
type Binary struct {
	Path    string        // the binary
	Config  []byte        // the config, as found on disk: the binary's stdin
	Type    string        // the config's resource-type
	Timeout time.Duration // per call; DefaultTimeout when 0
}

// NewBinary finds the binary of a config in binDir ("" for /opt/cdi/bin).
func NewBinary(cf *ConfigFile, binDir string) (*Binary, error) {
	path, err := FindBinary(binDir, cf.Config.Plugin)
	if err != nil {
		return nil, fmt.Errorf("CDI config %s: %w", cf.Path, err)
	}
	return &Binary{Path: path, Config: cf.Raw, Type: cf.Config.Type}, nil
}

// Version asks which versions the binary supports. VERSION must not fail.
func (b *Binary) Version(ctx context.Context) (*VersionReply, error) {
	out, err := b.call(ctx, CmdVersion, map[string]string{})
	if err != nil {
		return nil, err
	}
	var r VersionReply
	if err := decode(out, &r, CmdVersion); err != nil {
		return nil, err
	}
	return &r, b.wrap(CmdVersion, r.check())
}

// Info asks what is available: the binary's resource-type and subtypes.
func (b *Binary) Info(ctx context.Context, version string) (map[string]int64, error) {
	out, err := b.call(ctx, CmdInfo, map[string]string{EnvVersion: version})
	if err != nil {
		return nil, err
	}
	var r InfoReply
	if err := decode(out, &r, CmdInfo); err != nil {
		return nil, b.wrap(CmdInfo, err)
	}
	if err := checkReplyVersion(r.CDIVersion, version); err != nil {
		return nil, b.wrap(CmdInfo, err)
	}
	return r.Available, b.wrap(CmdInfo, CheckInfo(b.Type, r.Available))
}

// Add allocates resources for requestID; numa (optional) asks for devices
// near those NUMA nodes. A failed ADD is an *Error (errors.As).
func (b *Binary) Add(ctx context.Context, version string, resources []Amount, requestID string, numa []int) (*AddReply, error) {
	env := map[string]string{EnvVersion: version, EnvRequest: FormatRequest(resources), EnvRequestID: requestID}
	if len(numa) > 0 {
		env[EnvNUMALocality] = FormatNUMALocality(numa)
	}
	out, err := b.call(ctx, CmdAdd, env)
	if err != nil {
		return nil, err
	}
	var r AddReply
	if err := decode(out, &r, CmdAdd); err != nil {
		return nil, b.wrap(CmdAdd, err)
	}
	if err := checkReplyVersion(r.CDIVersion, version); err != nil {
		return nil, b.wrap(CmdAdd, err)
	}
	return &r, b.wrap(CmdAdd, r.check())
}

// Del returns what requestID holds. DEL must not fail: the error reply it
// may print for the log (e.g. code 5, unknown request ID) is returned as
// logged; err is for a binary that broke the draft or could not be run.
func (b *Binary) Del(ctx context.Context, version, requestID string) (logged *Error, err error) {
	out, err := b.call(ctx, CmdDel, map[string]string{EnvVersion: version, EnvRequestID: requestID})
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, nil
	}
	var e Error
	if err := decode(out, &e, CmdDel); err != nil {
		return nil, b.wrap(CmdDel, fmt.Errorf("DEL printed something that is no error reply: %w", err))
	}
	return &e, b.wrap(CmdDel, e.check())
}

func checkReplyVersion(got, want string) error {
	if got != want {
		return fmt.Errorf("reply cdiVersion %q, asked for %q", got, want)
	}
	return nil
}

func decode(out []byte, v any, cmd string) error {
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("%s reply %q is not the draft's JSON: %w", cmd, clip(out), err)
	}
	return nil
}

func (b *Binary) wrap(cmd string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("CDI binary %s %s: %w", b.Path, cmd, err)
}

// call runs the binary and returns its stdout when it exited 0. A non-zero
// exit is the binary's error reply (*Error), or an error saying it gave none;
// for VERSION and DEL, which must not fail, it is always an error.
func (b *Binary) call(ctx context.Context, cmd string, vars map[string]string) ([]byte, error) {
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := exec.CommandContext(ctx, b.Path)
	c.Env = childEnv(cmd, vars)
	c.Stdin = bytes.NewReader(b.Config)
	var stdout, stderr limitedBuffer
	c.Stdout, c.Stderr = &stdout, &stderr
	c.WaitDelay = time.Second
	runErr := c.Run()
	if ctx.Err() != nil {
		return nil, b.wrap(cmd, fmt.Errorf("no answer within %s (stderr %q): %w", timeout, clip(stderr.Bytes()), ctx.Err()))
	}
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		return nil, b.wrap(cmd, fmt.Errorf("run: %w", runErr))
	}
	if runErr == nil {
		return stdout.Bytes(), nil
	}
	return nil, b.failed(cmd, exitErr, stdout.Bytes(), stderr.Bytes())
}

// failed interprets a non-zero exit.
func (b *Binary) failed(cmd string, exitErr *exec.ExitError, stdout, stderr []byte) error {
	var e Error
	if err := json.Unmarshal(stdout, &e); err != nil || e.check() != nil {
		return b.wrap(cmd, fmt.Errorf("%v without an error reply (stdout %q, stderr %q)", exitErr, clip(stdout), clip(stderr)))
	}
	if cmd == CmdVersion || cmd == CmdDel {
		return b.wrap(cmd, fmt.Errorf("%s must not fail, but it exited with %v: %w", cmd, exitErr, &e))
	}
	return b.wrap(cmd, &e)
}

// childEnv is this process's environment without CDI_* variables, plus the call's.
func childEnv(cmd string, vars map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CDI_") {
			env = append(env, kv)
		}
	}
	env = append(env, EnvCommand+"="+cmd)
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

func clip(b []byte) string {
	const n = 512
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// limitedBuffer keeps the first maxOutput bytes and discards the rest, so a
// runaway binary cannot exhaust the caller's memory.
type limitedBuffer struct{ bytes.Buffer }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - l.Len(); room > 0 {
		l.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
