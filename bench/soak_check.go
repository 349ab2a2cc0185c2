package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// daemon is a process the soak started, its output in a log file.
type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func startDaemon(logDir, bin string, args ...string) (*daemon, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	name := filepath.Base(bin)
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name += " " + args[0]
	}
	logf, err := os.Create(filepath.Join(logDir, strings.ReplaceAll(name, " ", "-")+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	c := exec.Command(bin, args...)
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: c, done: make(chan struct{})}
	go func() { _ = c.Wait(); close(d.done) }()
	return d, nil
}

// stop sends SIGTERM and, after 5 s, SIGKILL.
func (d *daemon) stop() { terminate(d.cmd.Process, d.done, 5*time.Second) }

// terminate sends p SIGTERM and, if it has not exited (exited closed) within
// grace, SIGKILL, and waits for it.
func terminate(p *os.Process, exited <-chan struct{}, grace time.Duration) {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = p.Kill()
		<-exited
	}
}

// soakSample is what the soak compares between the warm-up and the end.
type soakSample struct {
	files, rss []int // per daemon: open files, resident KiB
}

func (n *soakNode) sample() soakSample {
	s := soakSample{}
	for _, d := range n.daemons {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
		files := len(ents)
		if err != nil {
			files = -1
		}
		s.files = append(s.files, files)
		s.rss = append(s.rss, readRSS(d.cmd.Process.Pid))
	}
	return s
}

// soakLeft counts what the cycles left behind.
type soakLeft struct {
	records, cniFiles, leases, netns, links, cache int
}

func (n *soakNode) leftovers() (soakLeft, error) {
	var l soakLeft
	var err error
	count := func(pattern string, skip ...string) int {
		m, gerr := filepath.Glob(pattern)
		err = errors.Join(err, gerr)
		c := 0
		for _, f := range m {
			if !slices.Contains(skip, filepath.Base(f)) {
				c++
			}
		}
		return c
	}
	l.records = count(filepath.Join(n.root, "state", "attachments", "*"))
	l.cniFiles = count(filepath.Join(n.root, "devinfo", "cni", "*"))
	l.leases = count(filepath.Join(n.e.dir, "ipam", soakNet, "*"), "lock", "last_reserved_ip.0")
	l.cache = count(filepath.Join(testenv.CnitoolResults, soakNet+"-*"))
	l.netns = n.netnsLeft()
	l.links = bridgePorts()
	return l, err
}

// soakTables reports the soak: what was left, and the daemons before and after.
func soakTables(cycles, warm, failAdd, failDel int, l soakLeft, before, after soakSample) []Table {
	left := Table{Title: fmt.Sprintf("Soak: %d ADD/DEL cycles, one pod at a time, on nodesim + netdev-dp + devplumbctl metrics", cycles),
		Header: []string{"failed ADDs", "failed DELs", "records left", "CNI device-info files left", "IPAM leases left",
			"netns left", "bridge ports (pod veths) left", "cnitool cache entries left"},
		Rows: [][]string{{fmt.Sprint(failAdd), fmt.Sprint(failDel), fmt.Sprint(l.records), fmt.Sprint(l.cniFiles),
			fmt.Sprint(l.leases), fmt.Sprint(l.netns), fmt.Sprint(l.links), fmt.Sprint(l.cache)}},
		Notes: []string{"Target: all 0. Each cycle: nodesim admits a pod asking one vhost-user socket of netdev-dp, cnitool ADD and DEL of devplumb -> bridge + host-local in a new netns, the netns and the pod removed."}}
	daemons := Table{Title: fmt.Sprintf("Soak: the daemons after the warm-up (%d cycles) and after the last cycle", warm),
		Header: []string{"daemon", "open files", "resident memory"}}
	for i, name := range []string{"nodesim", "netdev-dp", "devplumbctl metrics"} {
		if i >= len(before.files) || i >= len(after.files) {
			break
		}
		daemons.Rows = append(daemons.Rows, []string{name,
			fmt.Sprintf("%d -> %d", before.files[i], after.files[i]),
			fmt.Sprintf("%.1f -> %.1f MiB", float64(before.rss[i])/1024, float64(after.rss[i])/1024)})
	}
	daemons.Notes = []string{"Target: open files unchanged; memory flat (a Go heap moves with its GC cycle; a leak grows with the cycles)."}
	return []Table{left, daemons}
}
