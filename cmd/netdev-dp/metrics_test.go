package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/testenv"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestMetricsAndProbes runs the binary with --metrics-address against the
// kubelet emulator: /readyz follows registration, /metrics counts devices,
// registrations and allocations.
func TestMetricsAndProbes(t *testing.T) {
	b := newBinNode(t, "a.sock", "b.sock")
	addr := testenv.FreeAddr(t)
	var stderr bytes.Buffer
	cmd := exec.Command(b.bin, "--config", b.config, "--plugin-dir", b.node.PluginDir(),
		"--devinfo-dir", b.devinfoDir, "--cdi-dir", b.cdiDir, "--metrics-address", addr, "--log-format", "json",
		"--pod-resources-socket", b.node.PodResourcesSocket())
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	b.waitDevices(2, nil) // stderr is read once the process ended: no race
	waitStatus(t, "http://"+addr+"/readyz", http.StatusOK)
	if code, _ := get(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	if _, err := b.node.AddPod(context.Background(), kubeletsim.PodSpec{Namespace: "ns", Name: "p",
		Containers: []kubeletsim.ContainerSpec{{Name: "c", Requests: []kubeletsim.ResourceRequest{{Resource: "example.com/vhu", Count: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, "http://"+addr+"/metrics")
	for _, want := range []string{
		`netdev_dp_devices{health="healthy",resource="example.com/vhu"} 2`,
		`netdev_dp_devices{health="unhealthy",resource="example.com/vhu"} 0`,
		`netdev_dp_plugin_events_total{event="registered",resource="example.com/vhu"} 1`,
		`netdev_dp_plugin_events_total{event="allocated",resource="example.com/vhu"} 1`,
		`netdev_dp_plugin_events_total{event="allocate_failed",resource="example.com/vhu"} 0`,
		"process_resident_memory_bytes",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The kubelet's socket goes away: not ready until it is back.
	if err := os.Remove(b.node.PluginDir() + "/kubelet.sock"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, "http://"+addr+"/readyz", http.StatusServiceUnavailable)
	// The pod goes first: SIGTERM keeps the files of devices pods hold.
	if err := b.node.DelPod("ns", "p"); err != nil {
		t.Fatal(err)
	}
	b.sigterm(cmd, &stderr)
	if !strings.Contains(stderr.String(), `"msg":"serving metrics and probes"`) {
		t.Errorf("--log-format json: stderr is not JSON records:\n%s", stderr.String())
	}
}

// waitStatus polls url until it answers want; a refused connection (the daemon
// not listening yet) is a wait too.
func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := 0, ""
		if resp, err := http.Get(url); err != nil {
			body = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code, body = resp.StatusCode, string(b)
		}
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d %q, want %d", url, code, body, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestHelpAndVersionExitZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"--version"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 {
			t.Errorf("%v: exit %d, want 0\n%s", args, code, errOut.String())
		}
	}
	var out bytes.Buffer
	run([]string{"--version"}, &out, io.Discard)
	if !strings.HasPrefix(out.String(), "netdev-dp ") {
		t.Errorf("--version printed %q", out.String())
	}
	var errOut bytes.Buffer
	if code := run([]string{"--config", "x", "--log-format", "xml"}, io.Discard, &errOut); code != 2 || !strings.Contains(errOut.String(), "--log-format") {
		t.Errorf("bad --log-format: exit %d, %s", code, errOut.String())
	}
}

// TestHealthzFollowsTheKubelet kills the kubelet process and removes its kubelet.sock
// (the kubelet's side of the registration gone): with --health-grace=0, /healthz and
// /readyz fail at once, naming the resource; a new kubelet on the same root makes
// netdev-dp register again, and both recover; /metrics counts the restart.
func TestHealthzFollowsTheKubelet(t *testing.T) {
	bin := filepath.Join(testenv.Build(t, "./cmd/netdev-dp"), "netdev-dp")
	root, sockDir, work := t.TempDir(), t.TempDir(), t.TempDir()
	config := vhostUserSetup(t, sockDir, work, "a.sock")
	kubelet, _ := startKubelet(t, root)
	addr := testenv.FreeAddr(t)
	dp := exec.Command(bin, "--config", config, "--plugin-dir", kubeletsim.PluginDir(root),
		"--devinfo-dir", filepath.Join(work, "devinfo"), "--cdi-dir", filepath.Join(work, "cdi"),
		"--metrics-address", addr, "--health-grace=0")
	dp.Stderr = os.Stderr
	if err := dp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Process.Kill(); dp.Wait() })
	base := "http://" + addr
	waitStatus(t, base+"/readyz", http.StatusOK)
	waitStatus(t, base+"/healthz", http.StatusOK)

	kubelet.Process.Kill()
	kubelet.Wait()
	if err := os.Remove(filepath.Join(kubeletsim.PluginDir(root), "kubelet.sock")); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, base+"/healthz", http.StatusServiceUnavailable)
	if _, body := get(t, base+"/healthz"); !strings.Contains(body, "example.com/vhu: not registered with the kubelet for") {
		t.Errorf("/healthz says %q", body)
	}
	waitStatus(t, base+"/readyz", http.StatusServiceUnavailable)

	startKubelet(t, root)
	waitStatus(t, base+"/healthz", http.StatusOK)
	waitStatus(t, base+"/readyz", http.StatusOK)
	_, body := get(t, base+"/metrics")
	for _, want := range []string{
		`netdev_dp_plugin_events_total{event="registered",resource="example.com/vhu"} 2`,
		`netdev_dp_plugin_events_total{event="kubelet_restart",resource="example.com/vhu"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s\n%s", want, body)
		}
	}
}

// With --secure-metrics netdev-dp serves HTTPS: /metrics only to a token the API server
// accepts (none here: 401, without asking it), the probes to anyone. e2e/kubeapi's
// TestSecureMetrics runs the same guard against a real API server.
func TestSecureMetricsFlag(t *testing.T) {
	b := newBinNode(t, "a.sock")
	addr := testenv.FreeAddr(t)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: x}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.startWith("--metrics-address", addr, "--secure-metrics", "--metrics-kubeconfig", kc,
		"--pod-resources-socket", b.node.PodResourcesSocket())
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed on purpose
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no HTTPS answer on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := client.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", resp.StatusCode)
	}
	// Go's TLS server answers plain HTTP with 400, never with the metrics.
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP on the secure metrics address: %d, want 400", resp.StatusCode)
		}
	}
}
