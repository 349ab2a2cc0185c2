package bench

// Running a CNI plugin directly, as a container runtime does: what P4, P5 and P6 time.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// proc is one finished plugin process.
type proc struct {
	wall   time.Duration
	stderr []byte
}

// runPlugin runs a CNI plugin as a runtime does: CNI_* in the environment, the config on
// stdin.
func runPlugin(bin string, env []string, stdin []byte) (proc, error) {
	return run(exec.Command(bin), env, stdin)
}

// run runs c with env and stdin, timing it; a failure says what the plugin printed.
func run(c *exec.Cmd, env []string, stdin []byte) (proc, error) {
	bin := c.Args[len(c.Args)-1]
	c.Env = env
	c.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	start := time.Now()
	err := c.Run()
	p := proc{wall: time.Since(start), stderr: stderr.Bytes()}
	if err != nil {
		return p, fmt.Errorf("%s: %w: %s%s", filepath.Base(bin), err, stdout.Bytes(), stderr.Bytes())
	}
	return p, nil
}

// cniEnv is the environment of a direct plugin call for pod-0 in netns.
func (e *env) cniEnv(cmd, netns, containerID string, debug bool) []string {
	return e.cniEnvFor(cmd, netns, containerID, podName(0), debug)
}

// cniEnvFor is the environment of a direct plugin call for pod in netns.
func (e *env) cniEnvFor(cmd, netns, containerID, pod string, debug bool) []string {
	env := append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+containerID, "CNI_NETNS="+netns,
		"CNI_IFNAME=net1", "CNI_PATH="+e.bin, "CNI_ARGS="+e.cniArgs(pod), e.noAgent())
	if debug {
		env = append(env, "DEVPLUMB_DEBUG=1")
	}
	return env
}
