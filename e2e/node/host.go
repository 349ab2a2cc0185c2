package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// sysctls the kubelet sets (it "protects" kernel defaults by writing them) or the bridge
// plugin turns on: saved at start, written back at Close.
var sysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding",
}

// host is what a node changes on the host outside its temp dir, to put back at Close.
// It is also kept in stateFile while the node runs, so that the next run puts back what a
// killed one changed.
type host struct {
	lock    func()            // releases the host lock: one node per machine (service address, cgroups, mount points)
	Sysctls map[string]string // /proc/sys path -> value
	Created []string          // directories made as mount points, deepest last
	Links   []string          // links to delete
}

// stateFile holds a running node's host record (see host).
var stateFile = filepath.Join(os.TempDir(), "devplumb-node-host.json")

func (h *host) save() error {
	b, err := json.Marshal(h)
	if err == nil {
		err = os.WriteFile(stateFile+".tmp", b, 0o600)
	}
	if err == nil {
		err = os.Rename(stateFile+".tmp", stateFile)
	}
	if err != nil {
		return fmt.Errorf("node: save host state: %w", err)
	}
	return nil
}

// restoreKilled puts back what a killed run recorded in stateFile.
func restoreKilled() error {
	b, err := os.ReadFile(stateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var old host
	if err == nil {
		err = json.Unmarshal(b, &old)
	}
	if err == nil {
		err = old.restore()
	}
	if err != nil {
		return fmt.Errorf("node: put back what a killed run left (%s): %w", stateFile, err)
	}
	return nil
}

// preflight takes the machine-wide node lock and refuses to run next to a kubelet this
// harness did not start or next to another's kubepods cgroups.
func preflight() (*host, error) {
	h := &host{Sysctls: map[string]string{}}
	release, err := testenv.HoldHost(testenv.HostLockBound)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	h.lock = release
	if pids := processesNamed("kubelet"); len(pids) > 0 {
		h.lock()
		return nil, fmt.Errorf("node: a kubelet (pid %v) is running on this machine; e2e/node starts its own kubelet and will not run beside one it did not start: stop it first", pids)
	}
	if stale := staleProcesses(); len(stale) > 0 {
		// A run of this harness that was killed (its daemons died with it, by Pdeathsig,
		// but not the shims and their containers): finish its clean-up.
		for _, pid := range stale {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := killCgroups(); err != nil {
			h.lock()
			return nil, err
		}
	}
	if err := restoreKilled(); err != nil {
		h.lock()
		return nil, err
	}
	if dirs := kubepodsCgroups(); len(dirs) > 0 {
		h.lock()
		return nil, fmt.Errorf("node: kubelet cgroups exist (%s) but no kubelet runs: a node that was not stopped cleanly; remove them first", strings.Join(dirs, ", "))
	}
	for _, k := range sysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			h.Sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	if err := h.save(); err != nil {
		h.lock()
		return nil, err
	}
	return h, nil
}

// mountPoint makes dir (and missing parents) so a node's directory can be mounted on it;
// restore removes what it made.
func (h *host) mountPoint(dir string) error {
	var made []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("node: mount point %s: %w", dir, err)
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("node: mount point %s: %w", dir, err)
	}
	slices.Reverse(made)
	h.Created = append(h.Created, made...)
	return h.save()
}

// restore puts back the sysctls, deletes the node's links and the directories it made.
func (h *host) restore() error {
	var errs []error
	for _, l := range h.Links {
		if err := deleteLink(l); err != nil {
			errs = append(errs, err)
		}
	}
	for k, v := range h.Sysctls {
		cur, _ := os.ReadFile("/proc/sys/" + k)
		if strings.TrimSpace(string(cur)) != v {
			if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("node: restore sysctl %s=%s: %w", k, v, err))
			}
		}
	}
	for i := len(h.Created) - 1; i >= 0; i-- {
		if err := os.Remove(h.Created[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("node: remove mount point it made: %w", err))
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(stateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("node: %w", err))
		}
	}
	if h.lock != nil {
		h.lock()
	}
	return errors.Join(errs...)
}

// staleProcesses are processes of an earlier run of this harness (the lock is ours, so
// no other runs): their command line names a node directory.
func staleProcesses() []int {
	mark := []byte(filepath.Join(os.TempDir(), "devplumb-node-"))
	var out []int
	for _, pid := range allPids() {
		if pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && bytes.Contains(b, mark) {
			out = append(out, pid)
		}
	}
	return out
}

// processesNamed lists the pids whose command name is name.
func processesNamed(name string) []int {
	var out []int
	for _, pid := range allPids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if err == nil && strings.TrimSpace(string(b)) == name {
			out = append(out, pid)
		}
	}
	return out
}

func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// kubepodsCgroups are the kubelet's top cgroups (cgroupfs driver) in every hierarchy.
func kubepodsCgroups() []string {
	v1, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	v2, _ := filepath.Glob("/sys/fs/cgroup/kubepods")
	return append(v1, v2...)
}

// killCgroups kills every process in the kubepods cgroups (the pods' containers), then
// removes the cgroups, deepest first. Empty cgroups vanish once their last task is reaped.
func killCgroups() error {
	var errs []error
	for range 50 {
		errs = nil
		for _, top := range kubepodsCgroups() {
			if err := removeCgroupTree(top); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(errs...)
}

func removeCgroupTree(top string) error {
	var dirs []string
	_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		b, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("node: remove cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}
