package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Multus thick is two programs: multus-shim, the CNI binary the runtime runs, which
// forwards each call over a unix socket to multus-daemon, a long-running process (a
// DaemonSet on a node) that runs the delegates and talks to the API server. The bench
// runs the daemon as a local process against the bench's kube-apiserver.

// Where rest.InClusterConfig, which multus-daemon v4.3.0 always uses, as v4.2.3 did (its
// k8sclient.InClusterK8sClient; the only alternative, perNodeCertificate, needs a CSR
// signer the bench does not run), reads its credentials. The path is fixed in client-go.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// inClusterScript makes, in a mount namespace of its own, the file system a DaemonSet pod
// would see: a fresh /run holding the service account token and CA, with the host's
// /run/netns bound back in (the network namespaces the daemon's delegates enter). The
// host's /run is untouched, and the mounts go away with the process. $1 is a work dir
// holding token and ca.crt; the rest is the command, exec'd so its pid is the daemon's.
const inClusterScript = `set -e
d=$1; shift
mkdir -p "$d/hostrun"
mount --rbind /run "$d/hostrun"
mount -t tmpfs -o mode=0755 devplumb-bench /run
mkdir -p /run/netns ` + serviceAccountDir + `
mount --rbind "$d/hostrun/netns" /run/netns
cp "$d/token" "$d/ca.crt" ` + serviceAccountDir + `/
exec "$@"
`

// inClusterCmd is argv run as if in a pod of the cluster at apiURL: the service account
// files in place (token authenticates, caFile verifies the server) and
// KUBERNETES_SERVICE_HOST/PORT set. dir holds the namespace's work files.
func inClusterCmd(dir, apiURL, token, caFile string, argv ...string) (*exec.Cmd, error) {
	u, err := url.Parse(apiURL)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("API server URL %q: want https://host:port", apiURL)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("API server CA: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("in-cluster work dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600); err != nil {
		return nil, fmt.Errorf("service account token: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o644); err != nil {
		return nil, fmt.Errorf("service account CA: %w", err)
	}
	// Propagation slave: what is mounted in the namespace never reaches the host, while
	// a netns the host mounts later still shows up in the namespace's /run/netns.
	args := append([]string{"--mount", "--propagation", "slave", "--", "sh", "-c", inClusterScript, "sh", dir}, argv...)
	c := exec.Command("unshare", args...)
	c.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST="+u.Hostname(), "KUBERNETES_SERVICE_PORT="+u.Port())
	return c, nil
}

// thickDaemon is a running multus-daemon.
type thickDaemon struct {
	dir     string // its config, socket dir, log
	sockDir string
	log     string
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error // the process's exit, once exited is closed
}

// daemonConfig is multus-daemon's config file (its -config), as the upstream DaemonSet
// has it: multusConfigFile "auto" (the default), a config manager that watches the CNI
// config dir for the primary network and writes 00-multus.conf next to it. With a
// user-provided multusConfigFile instead, v4.3.0's main returns (as v4.2.3's), and the daemon exits,
// as soon as it has started. Every key here also overrides the same key of the network
// config the shim forwards, so it holds only what the daemon needs.
func daemonConfig(dir, sockDir string) map[string]any {
	netDir := filepath.Join(dir, "net.d")
	return map[string]any{"cniVersion": "1.0.0", "logLevel": "error", "logToStderr": true,
		"socketDir": sockDir, "cniConfigDir": netDir, "multusAutoconfigDir": netDir}
}

// startThick starts multus-daemon from bin under dir as a pod on node would run it, with
// primary as the node's primary network, and waits until it answers on its socket.
func startThick(dir, bin, node string, k *kubeNode, primary map[string]any) (*thickDaemon, error) {
	t := &thickDaemon{dir: dir, sockDir: filepath.Join(dir, "run"), log: filepath.Join(dir, "multus-daemon.log"),
		exited: make(chan struct{})}
	if err := t.writeConfig(primary); err != nil {
		return nil, err
	}
	c, err := inClusterCmd(filepath.Join(dir, "ns"), k.srv.URL, k.srv.Token,
		filepath.Join(k.srv.Dir, "certs", "apiserver.crt"), bin, "-config", filepath.Join(dir, "daemon-config.json"))
	if err != nil {
		return nil, err
	}
	// The pod informer watches this node's pods only, as in the DaemonSet.
	c.Env = append(c.Env, "MULTUS_NODE_NAME="+node)
	logf, err := os.Create(t.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start multus-daemon: %w", err)
	}
	t.cmd = c
	go func() { t.err = c.Wait(); close(t.exited) }()
	if err := t.waitReady(); err != nil {
		t.stop()
		return nil, fmt.Errorf("multus-daemon: %w; its log:\n%s", err, tailFile(t.log, 20))
	}
	return t, nil
}

// writeConfig writes the daemon's config and the primary network in its CNI config dir.
func (t *thickDaemon) writeConfig(primary map[string]any) error {
	if err := os.MkdirAll(filepath.Join(t.dir, "net.d"), 0o755); err != nil {
		return err
	}
	files := map[string]any{"daemon-config.json": daemonConfig(t.dir, t.sockDir), filepath.Join("net.d", "10-primary.conf"): primary}
	for name, v := range files {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(t.dir, name), b, 0o644); err != nil {
			return fmt.Errorf("multus-daemon config: %w", err)
		}
	}
	return nil
}

// thickReadyBound bounds the wait for the daemon: it syncs its pod and NAD informers
// (up to 20 s each when the API server does not answer) before it serves.
const thickReadyBound = 90 * time.Second

// waitReady polls the daemon's health endpoint until it answers, the daemon exits, or
// thickReadyBound passes.
func (t *thickDaemon) waitReady() error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(t.sockDir, "multus.sock"))
		}}}
	return waitReady(t.exited, func() error { return t.err }, thickReadyBound, 100*time.Millisecond, func() error {
		resp, err := client.Get("http://multus/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		return nil
	})
}

// waitReady tries ready every interval until it succeeds, the process exits (exited
// closed; exitErr its exit) or bound passes.
func waitReady(exited <-chan struct{}, exitErr func() error, bound, interval time.Duration, ready func() error) error {
	deadline := time.Now().Add(bound)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited while starting: %v", exitErr())
		case <-time.After(interval):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s: %w", bound, err)
		}
	}
}

// stop ends the daemon (SIGTERM, then SIGKILL) and waits for it; its mount namespace
// goes with it.
func (t *thickDaemon) stop() {
	if t == nil || t.cmd == nil {
		return
	}
	terminate(t.cmd.Process, t.exited, 10*time.Second)
}

// tailFile is the last n lines of path, for errors.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// thickSkipReason says why the Multus thick row is not run, or nil when it is.
func thickSkipReason(cfg Config) error {
	switch {
	case cfg.MultusThick == "":
		return errors.New("no binaries given (make bench builds multus-shim and multus-daemon with scripts/build-multus.sh thick)")
	case cfg.kube == nil:
		return errors.New("multus-daemon needs a kube-apiserver (run the bench with -kube, as make bench does)")
	}
	return nil
}

const thickLabel = "Multus thick -> bridge + network-status (API)"

// thickDir is where the env's multus-daemon keeps its config, socket and log.
func thickDir(e *env) string { return filepath.Join(e.dir, "multus-daemon") }

// thickShimConf is the network cnitool runs through multus-shim. Multus's own keys (the
// delegate, where it finds the plugins and keeps its cache) are read by the daemon, which
// gets the whole config over the socket.
func thickShimConf(e *env) map[string]any {
	return map[string]any{"cniVersion": "1.0.0", "name": "multusthick", "type": "multus-shim",
		"daemonSocketDir": filepath.Join(thickDir(e), "run"), "binDir": e.bin,
		"cniDir": filepath.Join(e.dir, "multus-thick"), "delegates": []any{thickPrimary(e)}}
}

// thickPrimary is the bridge network Multus thick delegates to, which is also the node's
// primary network in the daemon's CNI config dir (its config manager requires one).
func thickPrimary(e *env) map[string]any {
	c := e.bridge("10.123.6.0/24")
	c["cniVersion"], c["name"] = "1.0.0", "multus-thick-bridge"
	return c
}

// startThickIfRun starts the env's multus-daemon when P1 runs the thick variant, after
// its pod exists in the API server (the daemon reads it, and checks its UID) and the
// network namespaces exist.
func startThickIfRun(e *env, vs []*variant) error {
	for _, v := range vs {
		if v.label != thickLabel {
			continue
		}
		if _, err := e.cfg.kube.pod(v.pod); err != nil {
			return err
		}
		// As in a cluster running Multus: without the NAD CRD the daemon's NAD informer
		// fails to list, and its start waits 20 s for that informer's sync.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := e.cfg.kube.srv.InstallNADCRD(ctx)
		cancel()
		if err != nil {
			return err
		}
		t, err := startThick(thickDir(e), filepath.Join(e.cfg.MultusThick, "multus-daemon"), kubeNodeName, e.cfg.kube, thickPrimary(e))
		if err != nil {
			return err
		}
		e.mu.Lock()
		e.thick = t
		e.mu.Unlock()
	}
	return nil
}
