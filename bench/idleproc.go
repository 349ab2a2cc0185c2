package bench

// P1's idle agent runs in a process of its own, as the agent of any agent-based
// meta-plugin does (devplumb's among them). In the bench's process, which also serves
// the kubelet's PodResources API, its Get woke no other process, and the bench's own
// goroutines kept it warm between calls: the least rows cost less than any agent can.
// The bench starts itself again with the idle agent's environment, which main (and the
// package's TestMain) hand to ServeIdleAgentIfAsked first thing.

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

const (
	idleSocketEnv     = "DEVPLUMB_BENCH_IDLE_AGENT"      // the socket the idle agent's process serves
	idleKubeconfigEnv = "DEVPLUMB_BENCH_IDLE_KUBECONFIG" // the kubeconfig of its writes ("": none)
)

// ServeIdleAgentIfAsked returns at once, unless this process was started as P1's idle
// agent: then it serves the agent until SIGTERM and exits.
func ServeIdleAgentIfAsked() {
	if socket := os.Getenv(idleSocketEnv); socket != "" {
		os.Exit(serveIdleAgent(socket, os.Getenv(idleKubeconfigEnv)))
	}
}

// serveIdleAgent serves the idle agent on socket, making its writes with a client of
// kubeconfig, until SIGTERM or an interrupt; it returns the exit code.
func serveIdleAgent(socket, kubeconfig string) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	var d *statusDaemon
	if kubeconfig != "" {
		var err error
		if d, err = newStatusClient(kubeconfig); err != nil {
			fmt.Fprintln(os.Stderr, "idle agent:", err)
			return 1
		}
		defer d.close()
	}
	stop, err := startIdleAgent(socket, func() *statusDaemon { return d })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {
	case <-sig:
	case <-orphaned(os.Getppid()):
	}
	stop()
	return 0
}

// orphaned is closed once this process's parent is no longer ppid: a bench that was
// killed takes its idle agent along. (Pdeathsig would follow the thread that started
// the process, and the bench's netns work ends threads.)
func orphaned(ppid int) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		for os.Getppid() == ppid {
			time.Sleep(time.Second)
		}
		close(gone)
	}()
	return gone
}

// spawnIdleAgent starts the idle agent on socket in a process of its own (this
// executable, started again), its writes made with a client of kubeconfig ("": none),
// and returns once it answers a hello; stop ends it.
func spawnIdleAgent(socket, kubeconfig string) (stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("idle agent: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), idleSocketEnv+"="+socket, idleKubeconfigEnv+"="+kubeconfig)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("idle agent: %w", err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	stop = func() { terminate(cmd.Process, exited, 10*time.Second) }
	err = waitReady(exited, func() error { return exitErr }, agentReadyBound, 20*time.Millisecond, helloAnswered(socket))
	if err != nil {
		stop()
		return nil, fmt.Errorf("idle agent: %w", err)
	}
	return stop, nil
}
