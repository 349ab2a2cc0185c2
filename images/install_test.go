// The installer script the devplumb image runs, against temp directories standing in for
// the host and the service account.

package images

import (
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// bound is how long the script may take to notice a change or a signal: a bound on a
// wait, not a speed assertion.
const bound = 30 * time.Second

// installer is install.sh set up to run against temp directories.
type installer struct {
	script, cniBin, kcDir, sa string
}

func newInstaller(t *testing.T) *installer {
	t.Helper()
	dir := t.TempDir()
	fakeBin := filepath.Join(dir, "usr-local-bin")
	in := &installer{sa: filepath.Join(dir, "sa"), script: filepath.Join(dir, "install.sh"),
		cniBin: filepath.Join(dir, "host", "opt", "cni", "bin"), kcDir: filepath.Join(dir, "host", "etc", "cni", "net.d", "devplumb.d")}
	for _, d := range []string{fakeBin, in.sa} {
		must(t, os.MkdirAll(d, 0o755))
	}
	in.writeSA(t, "tok-123", "CA-1")
	// The script copies devplumb and devplumb-direct from /usr/local/bin; run a copy
	// that reads from fakeBin.
	script, err := os.ReadFile("devplumb/install.sh")
	must(t, err)
	for _, b := range []string{"devplumb", "devplumb-direct"} {
		must(t, os.WriteFile(filepath.Join(fakeBin, b), []byte("#!/bin/sh\necho "+b+"\n"), 0o755))
	}
	local := strings.ReplaceAll(string(script), "/usr/local/bin/", fakeBin+"/")
	must(t, os.WriteFile(in.script, []byte(local), 0o755))
	return in
}

// writeSA replaces the token and CA the way the kubelet does: new files renamed in.
func (in *installer) writeSA(t *testing.T, token, ca string) {
	t.Helper()
	for name, data := range map[string]string{"token": token, "ca.crt": ca} {
		tmp := filepath.Join(in.sa, "."+name)
		must(t, os.WriteFile(tmp, []byte(data), 0o600))
		must(t, os.Rename(tmp, filepath.Join(in.sa, name)))
	}
}

func (in *installer) cmd(refresh string, args ...string) *exec.Cmd {
	cmd := exec.Command("sh", append([]string{in.script}, args...)...)
	cmd.Env = append(os.Environ(), "CNI_BIN_DIR="+in.cniBin, "KUBECONFIG_DIR="+in.kcDir, "SA_DIR="+in.sa,
		"KUBERNETES_SERVICE_HOST=fd00::1", "KUBERNETES_SERVICE_PORT=6443", "REFRESH_SECONDS="+refresh)
	return cmd
}

func (in *installer) kubeconfig(t *testing.T) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(in.kcDir, "devplumb.kubeconfig"))
	if err != nil {
		t.Fatalf("kubeconfig does not load: %v", err)
	}
	return cfg
}

// waitKubeconfig waits until the kubeconfig carries token and CA.
func (in *installer) waitKubeconfig(t *testing.T, token, ca string) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(in.kcDir, "devplumb.kubeconfig"))
		if err == nil && cfg.BearerToken == token && string(cfg.CAData) == ca {
			return
		}
		if time.Now().After(deadline) {
			if err == nil {
				t.Fatalf("kubeconfig has token %q and CA %q %s later, want %q and %q", cfg.BearerToken, cfg.CAData, bound, token, ca)
			}
			t.Fatalf("kubeconfig with token %q and CA %q not written within %s: %v", token, ca, bound, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestInstallScriptWritesBinaryAndKubeconfig(t *testing.T) {
	in := newInstaller(t)
	ca := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	in.writeSA(t, "tok-123", ca)
	out, err := in.cmd("60", "install").CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	for _, b := range []string{"devplumb", "devplumb-direct"} {
		got, err := os.ReadFile(filepath.Join(in.cniBin, b))
		st, serr := os.Stat(filepath.Join(in.cniBin, b))
		if err != nil || serr != nil || st.Mode().Perm() != 0o755 || !strings.Contains(string(got), "echo "+b+"\n") {
			t.Fatalf("installed %s: %v %v %q", b, st, err, got)
		}
	}
	// The entry point execs devplumb-direct beside it: it is in place first.
	direct := strings.Index(string(out), "installed "+filepath.Join(in.cniBin, "devplumb-direct"))
	entry := strings.Index(string(out), "installed "+filepath.Join(in.cniBin, "devplumb")+"\n")
	if direct < 0 || entry < direct {
		t.Errorf("install.sh installed devplumb before devplumb-direct:\n%s", out)
	}
	kc := filepath.Join(in.kcDir, "devplumb.kubeconfig")
	st, err := os.Stat(kc)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig must be 0600: %v %v", st, err)
	}
	cfg := in.kubeconfig(t)
	if cfg.Host != "https://[fd00::1]:6443" || cfg.BearerToken != "tok-123" || string(cfg.CAData) != ca {
		t.Fatalf("kubeconfig: host %q token %q CA %q", cfg.Host, cfg.BearerToken, base64.StdEncoding.EncodeToString(cfg.CAData))
	}
	if left, _ := filepath.Glob(filepath.Join(in.kcDir, ".*")); len(left) > 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

// TestInstallScriptRefusesWithoutItsInputs: no API server address or no CA fails with a
// message naming what is missing, and no kubeconfig is written.
func TestInstallScriptRefusesWithoutItsInputs(t *testing.T) {
	for _, missing := range []string{"KUBERNETES_SERVICE_HOST", "ca.crt"} {
		in := newInstaller(t)
		cmd := in.cmd("60", "install")
		if missing == "ca.crt" {
			must(t, os.Remove(filepath.Join(in.sa, "ca.crt")))
		} else {
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CNI_BIN_DIR=" + in.cniBin, "KUBECONFIG_DIR=" + in.kcDir, "SA_DIR=" + in.sa}
		}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), missing) {
			t.Errorf("without %s: err %v, output %s", missing, err, out)
		}
		if _, err := os.Stat(filepath.Join(in.kcDir, "devplumb.kubeconfig")); !os.IsNotExist(err) {
			t.Errorf("a kubeconfig was written without %s: %v", missing, err)
		}
	}
}

// TestInstallScriptFollowsRotation: in run mode, a rotated token and a new CA reach the
// kubeconfig, and an empty token read in passing (a half-done rotation) does not stop the
// script from taking the complete one after it.
func TestInstallScriptFollowsRotation(t *testing.T) {
	in := newInstaller(t)
	cmd := in.cmd("1", "run")
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	in.waitKubeconfig(t, "tok-123", "CA-1")
	in.writeSA(t, "tok-456", "CA-1")
	in.waitKubeconfig(t, "tok-456", "CA-1")
	in.writeSA(t, "tok-456", "CA-2")
	in.waitKubeconfig(t, "tok-456", "CA-2")
	in.writeSA(t, "", "CA-2")
	in.writeSA(t, "tok-789", "CA-3")
	in.waitKubeconfig(t, "tok-789", "CA-3")
}

// TestInstallScriptStopsOnTERMAsPID1: as a container's PID 1 (no default action for
// SIGTERM) and in the middle of a long sleep, the script stops at once on SIGTERM, so a
// DaemonSet rollout does not wait out the grace period for each node.
func TestInstallScriptStopsOnTERMAsPID1(t *testing.T) {
	in := newInstaller(t)
	inner := in.cmd("3600", "run")
	cmd := exec.Command("unshare", append([]string{"--pid", "--fork", "--kill-child"}, inner.Args...)...)
	cmd.Env = inner.Env
	must(t, cmd.Start())
	// One Wait, whose result the test reads; closed after, so the cleanup's
	// receive returns whether or not the test read it.
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	in.waitKubeconfig(t, "tok-123", "CA-1")
	pid1 := childOf(t, cmd.Process.Pid)
	must(t, syscall.Kill(pid1, syscall.SIGTERM))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(bound):
		t.Fatalf("run still going %s after SIGTERM to it as PID 1", bound)
	}
}

// childOf returns the only child of pid (unshare's forked PID 1).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	p := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children"
	b, err := os.ReadFile(p)
	must(t, err)
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("%s: %q, want one child", p, b)
	}
	c, err := strconv.Atoi(f[0])
	must(t, err)
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestInstallScriptAPIServerAndReachability runs the script as the image does, under
// busybox's shell and tools: the kubeconfig names API_SERVER when it is set (clusters
// without kube-proxy, where the service address does not work from the host network),
// and the script warns when the server it wrote does not answer, and only then.
func TestInstallScriptAPIServerAndReachability(t *testing.T) {
	tools := busyboxTools(t)
	open, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer open.Close()
	shut, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	shut.Close() // nothing listens there any more
	for _, tc := range []struct {
		url  string
		warn bool
	}{{"https://" + open.Addr().String(), false}, {"https://" + shut.Addr().String(), true}} {
		in := newInstaller(t)
		cmd := in.cmd("60", "install")
		cmd.Path, cmd.Args = "/bin/busybox", append([]string{"busybox", "sh"}, cmd.Args[1:]...)
		cmd.Env = append(cmd.Env, "PATH="+tools, "API_SERVER="+tc.url)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("install.sh: %v\n%s", err, out)
		}
		if h := in.kubeconfig(t).Host; h != tc.url {
			t.Errorf("kubeconfig server %q, want API_SERVER %q", h, tc.url)
		}
		if got := strings.Contains(string(out), "does not answer"); got != tc.warn {
			t.Errorf("server %s: warning %v, want %v; output:\n%s", tc.url, got, tc.warn, out)
		}
	}
}

// busyboxTools is a directory with a link to /bin/busybox (Debian busybox-static, which
// the devplumb image has) for each of its applets: the image's PATH.
func busyboxTools(t *testing.T) string {
	t.Helper()
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		t.Fatalf("/bin/busybox (Debian busybox-static; make test installs it): %v", err)
	}
	dir := t.TempDir()
	for _, a := range strings.Fields(string(list)) {
		must(t, os.Symlink("/bin/busybox", filepath.Join(dir, a)))
	}
	return dir
}

// TestInstallScriptWritesNodeConfig: under busybox, as the image runs it, and under umask
// 077, the installer writes devplumb's node config: KUBECONFIG_DIR/node.json, mode 0644,
// naming the kubeconfig's host path and, only when set, POD_RESOURCES_SOCKET, STATE_DIR
// and DEVICE_INFO_DIR; a file devplumb's own parser accepts, replacing the file there.
func TestInstallScriptWritesNodeConfig(t *testing.T) {
	tools := busyboxTools(t)
	for _, tc := range []struct {
		env  []string
		want map[string]any
	}{
		{nil, map[string]any{"kubeconfig": "/etc/cni/net.d/devplumb.d/devplumb.kubeconfig"}},
		{[]string{"POD_RESOURCES_SOCKET=/run/kubelet/pr.sock", "STATE_DIR=/var/lib/dp", "DEVICE_INFO_DIR=/run/devinfo",
			"HOST_KUBECONFIG_DIR=/etc/kc"}, map[string]any{"kubeconfig": "/etc/kc/devplumb.kubeconfig",
			"podResourcesSocket": "/run/kubelet/pr.sock", "stateDir": "/var/lib/dp", "deviceInfoDir": "/run/devinfo"}},
		{[]string{"STATE_DIR="}, map[string]any{"kubeconfig": "/etc/cni/net.d/devplumb.d/devplumb.kubeconfig"}},
	} {
		in := newInstaller(t)
		path := filepath.Join(in.kcDir, "node.json")
		must(t, os.MkdirAll(in.kcDir, 0o755))
		must(t, os.WriteFile(path, []byte(`{"stateDir": "/old"}`), 0o600))
		old, err := os.Stat(path)
		must(t, err)
		if out, err := in.installCmd(t, true, tools, tc.env...).CombinedOutput(); err != nil {
			t.Fatalf("install.sh %v: %v\n%s", tc.env, err, out)
		}
		st, err := os.Stat(path)
		must(t, err)
		if st.Mode().Perm() != 0o644 || os.SameFile(st, old) {
			t.Errorf("%v: node.json mode %v (want 0644), the old file replaced: %v", tc.env, st.Mode(), !os.SameFile(st, old))
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
			t.Errorf("node.json owned by uid %d, not the installer's %d", sys.Uid, os.Getuid())
		}
		b, err := os.ReadFile(path)
		must(t, err)
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: node.json %s (%v), want %v", tc.env, b, err, tc.want)
		}
		if _, err := nodeconfig.Parse(b); err != nil {
			t.Errorf("devplumb refuses the node config: %v", err)
		}
	}
}

// TestInstallScriptWritesNodeConfigAtomically: node.json is a temp file in its own
// directory, synced, then renamed into place (busybox's shell runs its own mv and sync,
// so this runs the script under sh with mv and sync wrapped to log their calls, each
// running busybox's).
func TestInstallScriptWritesNodeConfigAtomically(t *testing.T) {
	in := newInstaller(t)
	calls := filepath.Join(t.TempDir(), "calls")
	shims := t.TempDir()
	for _, tool := range []string{"mv", "sync"} {
		shim := "#!/bin/sh\necho \"" + tool + " $*\" >> " + calls + "\nexec /bin/busybox " + tool + " \"$@\"\n"
		must(t, os.WriteFile(filepath.Join(shims, tool), []byte(shim), 0o755))
	}
	if out, err := in.installCmd(t, false, shims+":"+os.Getenv("PATH")).CombinedOutput(); err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	checkAtomic(t, calls, in.kcDir)
}

// checkAtomic: the calls log shows node.json came from a synced temp file in its directory.
func checkAtomic(t *testing.T, calls, dir string) {
	t.Helper()
	log, err := os.ReadFile(calls)
	must(t, err)
	tmp := filepath.Join(dir, ".node.json.tmp")
	syncAt := strings.Index(string(log), "sync "+tmp+"\n")
	mvAt := strings.Index(string(log), "mv -f "+tmp+" "+filepath.Join(dir, "node.json")+"\n")
	if syncAt < 0 || mvAt < syncAt {
		t.Errorf("node.json not written as a synced temp file renamed into place; calls:\n%s", log)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temp files left: %v", left)
	}
}

// TestInstallScriptRefusesABadNodeConfigPath: a setting that is not an absolute path, or
// that JSON would need escaped, fails the install naming the value; no node.json is written.
func TestInstallScriptRefusesABadNodeConfigPath(t *testing.T) {
	tools := busyboxTools(t)
	for _, env := range []string{"STATE_DIR=var/lib/dp", `DEVICE_INFO_DIR=/run/a"b`, `POD_RESOURCES_SOCKET=/run/a\b`} {
		in := newInstaller(t)
		out, err := in.installCmd(t, true, tools, env).CombinedOutput()
		if err == nil || !strings.Contains(string(out), strings.SplitN(env, "=", 2)[1]) {
			t.Errorf("%s: install.sh %v, want a refusal naming the value:\n%s", env, err, out)
		}
		if _, err := os.Stat(filepath.Join(in.kcDir, "node.json")); err == nil {
			t.Errorf("%s: node.json written", env)
		}
	}
}

// installCmd is `install.sh install` with umask 077 and PATH path, under busybox's shell
// or sh.
func (in *installer) installCmd(t *testing.T, busybox bool, path string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := in.cmd("60", "install")
	shell := "sh"
	if busybox {
		shell = "/bin/busybox sh"
		cmd.Path = "/bin/busybox"
		cmd.Args = []string{"busybox", "sh"}
	} else {
		cmd.Args = []string{"sh"}
	}
	cmd.Args = append(cmd.Args, "-c", `umask 077 && exec `+shell+` "$0" "$@"`, in.script, "install")
	cmd.Env = append(append(cmd.Env, "PATH="+path), env...)
	return cmd
}
