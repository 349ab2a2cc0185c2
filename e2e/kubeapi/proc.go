package kubeapi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// proc is a child process and the channel closed when it has exited (and been reaped).
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// exited tells whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// spawn starts bin with its output in dir/<name>.log. The child gets SIGKILL if the test
// process dies (a panic, the go test -timeout, a kill), so a crashed test leaves no server
// behind.
func spawn(dir, name, bin string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = startOnSpawnerThread(cmd)
	logf.Close() // the child has its own descriptor
	if err != nil {
		return nil, fmt.Errorf("kubeapi: start %s (%s): %w", name, bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pdeathsig fires when the OS thread that started the child exits, not the process. Go
// ends threads whose goroutine exits while locked to them (network namespace code does
// that), so children are started from one goroutine that locks its thread for good.
var (
	spawnOnce sync.Once
	spawnReqs = make(chan func())
)

func startOnSpawnerThread(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range spawnReqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnReqs <- func() { errc <- cmd.Start() }
	return <-errc
}

// stop kills the process group and waits until the child is reaped, so its port is free.
func stop(p *proc) {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Proc is a process started by Spawn, for harnesses built on this package (e2e/node).
type Proc struct{ p *proc }

// Spawn starts bin with its output in dir/<name>.log, as the API server's processes are
// started: it gets SIGKILL if the test process dies.
func Spawn(dir, name, bin string, args ...string) (*Proc, error) {
	p, err := spawn(dir, name, bin, args...)
	if err != nil {
		return nil, err
	}
	return &Proc{p: p}, nil
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.p.cmd.Process.Pid }

// Exited tells whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	if p.p.exited() {
		return true, p.p.err
	}
	return false, nil
}

// Kill kills the process group and waits until the process is reaped.
func (p *Proc) Kill() { stop(p.p) }

// Terminate sends SIGTERM and waits up to grace for the process to exit, then kills it.
func (p *Proc) Terminate(grace time.Duration) {
	_ = p.p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.p.done:
	case <-time.After(grace):
		stop(p.p)
	}
}
