package node

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// mountNS is the node's own mount namespace (private propagation, as this machine's /
// is): containerd, the kubelet and the pods see the node's directories mounted on the
// host paths they hard-code (/var/lib/kubelet, /opt/cni/bin, /etc/cni/net.d, /run/netns,
// ...) while the host keeps its own. A holder process keeps it alive; when the last
// process in it ends, its mounts go with it.
type mountNS struct {
	holder *kubeapi.Proc
	path   string // /proc/<holder>/ns/mnt
	ino    uint64
}

func newMountNS(dir string) (*mountNS, error) {
	p, err := kubeapi.Spawn(dir, "mountns", "unshare", "--mount", "--propagation", "private", "sleep", "infinity")
	if err != nil {
		return nil, err
	}
	m := &mountNS{holder: p, path: "/proc/" + strconv.Itoa(p.Pid()) + "/ns/mnt"}
	self, err := nsIno("/proc/self/ns/mnt")
	if err != nil {
		p.Kill()
		return nil, err
	}
	for range 100 { // unshare execs sleep once the namespace exists
		if ino, err := nsIno(m.path); err == nil && ino != self {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/comm"); strings.TrimSpace(string(b)) == "sleep" {
				m.ino = ino
				return m, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.Kill()
	return nil, fmt.Errorf("node: mount namespace holder did not start")
}

func nsIno(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("node: %s: %w", path, err)
	}
	return st.Ino, nil
}

// bind mounts src on dst inside the namespace.
func (m *mountNS) bind(src, dst string) error {
	out, err := exec.Command("nsenter", "--mount="+m.path, "--", "mount", "--bind", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("node: bind %s on %s: %w: %s", src, dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// unmount lazily unmounts whatever is mounted at dir (and below) inside the namespace;
// nothing mounted there is fine.
func (m *mountNS) unmount(dir string) {
	_ = exec.Command("nsenter", "--mount="+m.path, "--", "umount", "--recursive", "--lazy", dir).Run()
}

// makeShared makes the mount at dir shared inside the namespace: how is --make-shared
// (that mount) or --make-rshared (and every mount below it).
func (m *mountNS) makeShared(how, dir string) error {
	out, err := exec.Command("nsenter", "--mount="+m.path, "--", "mount", how, dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("node: make %s shared: %w: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// command is argv running bin with args inside the namespace (nsenter execs it: same pid).
func (m *mountNS) command(env []string, bin string, args ...string) []string {
	argv := []string{"--mount=" + m.path, "--", "env"}
	argv = append(argv, env...)
	return append(append(argv, bin), args...)
}

// members are the processes in the namespace (the holder, containerd, its shims, the
// kubelet; not the containers, which have their own).
func (m *mountNS) members() []int {
	var out []int
	for _, pid := range allPids() {
		if ino, err := nsIno("/proc/" + strconv.Itoa(pid) + "/ns/mnt"); err == nil && ino == m.ino {
			out = append(out, pid)
		}
	}
	return out
}

// close kills every process in the namespace, which ends it.
func (m *mountNS) close() {
	for range 50 {
		pids := m.members()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.holder.Kill()
}
