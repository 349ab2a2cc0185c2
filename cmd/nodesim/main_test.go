package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/kubeletsim/kubeletsimtest"
	"github.com/devplumb/devplumb/podresources"
)

const vf = "example.com/vf"

// logWatch is serve's stderr: it keeps the log and says when a line appeared.
type logWatch struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func (l *logWatch) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if l.seen != nil && strings.Contains(l.buf.String(), l.want) {
		close(l.seen)
		l.seen = nil
	}
	return len(p), nil
}

// startServe runs `nodesim serve` in-process until the returned stop is called.
func startServe(t *testing.T, root string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lw := &logWatch{want: "Serving device plugin registration server", seen: make(chan struct{})}
	ready := lw.seen
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve", "--root", root}, os.Stdout, lw) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve ended before it was ready: %v\n%s", err, lw.buf.String())
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func nodesim(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(t.Context(), args, &out, os.Stderr)
	return out.String(), err
}

func shortRoot(t *testing.T) string {
	d, err := os.MkdirTemp("", "ns")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestServePodAddRestartDel(t *testing.T) {
	root := shortRoot(t)
	stop := startServe(t, root)
	plugin := kubeletsimtest.NewPlugin(t, kubeletsim.PluginDir(root), vf, "vf.sock",
		kubeletsimtest.Dev("0000:03:00.2", 0), kubeletsimtest.Dev("0000:03:00.1", 0), kubeletsimtest.Dev("0000:81:00.1", 1))
	plugin.Start(t.Context(), true)
	// Registered is not yet advertised: wait for the device list, as scripts do.
	if _, err := nodesim(t, "wait", "--root", root, "--resource", vf); err != nil {
		t.Fatalf("wait: %v", err)
	}

	out, err := nodesim(t, "pod", "add", "--root", root, "--namespace", "default", "--name", "web",
		"--container", "app="+vf+":2", "--container", "side")
	if err != nil {
		t.Fatalf("pod add: %v", err)
	}
	var alloc kubeletsim.PodAllocation
	if err := json.Unmarshal([]byte(out), &alloc); err != nil {
		t.Fatalf("pod add output %q: %v", out, err)
	}
	want := []string{"0000:03:00.2", "0000:03:00.1"}
	if !slices.Equal(alloc.Devices(vf), want) || !strings.Contains(out, `"allocateResponse"`) ||
		alloc.Containers[0].Resources[0].Response.GetEnvs()["STUB_DEVICES"] != strings.Join(want, ",") {
		t.Fatalf("pod add printed %s", out)
	}

	// Restart: the assignment survives, the plugin registers again.
	stop()
	startServe(t, root)
	if err := plugin.WaitRegistrations(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	out, err = nodesim(t, "pods", "--root", root)
	var pods []kubeletsim.PodAllocation
	if err != nil || json.Unmarshal([]byte(out), &pods) != nil || len(pods) != 1 || !slices.Equal(pods[0].Devices(vf), want) {
		t.Fatalf("pods after restart: %v %s", err, out)
	}
	c, err := podresources.New(kubeletsim.PodResourcesSocket(root))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ids, err := c.Devices(t.Context(), "default", "web", vf); err != nil || !slices.Equal(ids, want) {
		t.Fatalf("PodResources after restart: %v %v", ids, err)
	}

	if _, err := nodesim(t, "pod", "del", "--root", root, "--namespace", "default", "--name", "web"); err != nil {
		t.Fatalf("pod del: %v", err)
	}
	_, err = nodesim(t, "pod", "del", "--root", root, "--namespace", "default", "--name", "web")
	if !errors.Is(err, kubeletsim.ErrPodNotFound) || exitCode(err, &bytes.Buffer{}, &bytes.Buffer{}) != 1 {
		t.Fatalf("second pod del: %v", err)
	}
	if out, _ := nodesim(t, "pods", "--root", root); strings.TrimSpace(out) != "[]" {
		t.Fatalf("pods after del = %s", out)
	}
}

func TestUsageErrors(t *testing.T) {
	root := shortRoot(t)
	for _, args := range [][]string{
		nil,
		{"bogus"},
		{"pod"},
		{"pod", "add", "--root", root, "--name", "p", "--container", "c=" + vf + ":1"},
		{"pod", "add", "--root", root, "--namespace", "n", "--name", "p"},
		{"pod", "add", "--root", root, "--namespace", "n", "--name", "p", "--container", "c=" + vf},
		{"pod", "add", "--root", root, "--namespace", "n", "--name", "p", "--container", "c=" + vf + ":0"},
		{"pod", "add", "--root", root, "--namespace", "n", "--name", "p", "--container", "=" + vf + ":1"},
		{"serve"},
		{"serve", "--root", root, "--podresources-get", "maybe"},
		{"serve", "--root", root, "--plugin-grace-period", "0s"},
		{"serve", "--root", root, "--log-level", "loud"},
		{"serve", "--root", root, "--log-format", "xml"},
		{"pod", "add", "--root", root, "--namespace", "n", "--name", "p", "--container", "c=vf:1"}, // no domain: checked before asking the node
		{"pods", "extra"},
		{"wait", "--root", root},
	} {
		if _, err := nodesim(t, args...); exitCode(err, &bytes.Buffer{}, &bytes.Buffer{}) != 2 {
			t.Errorf("nodesim %v: %v, want a usage error", args, err)
		}
	}
	if _, err := nodesim(t, "wait", "--root", root, "--resource", vf); exitCode(err, &bytes.Buffer{}, &bytes.Buffer{}) != 1 {
		t.Errorf("wait without serve: %v", err)
	}
	_, err := nodesim(t, "pods", "--root", filepath.Join(root, "none"))
	if err == nil || !strings.Contains(err.Error(), "no nodesim serving root") || exitCode(err, &bytes.Buffer{}, &bytes.Buffer{}) != 1 {
		t.Fatalf("pods without serve: %v", err)
	}
}

func TestParseContainer(t *testing.T) {
	c, err := parseContainer("app=example.com/vf:2,example.com/pf:1")
	if err != nil || c.Name != "app" || len(c.Requests) != 2 || c.Requests[1] != (kubeletsim.ResourceRequest{Resource: "example.com/pf", Count: 1}) {
		t.Fatalf("parseContainer = %+v, %v", c, err)
	}
	if c, err := parseContainer("bare"); err != nil || c.Name != "bare" || len(c.Requests) != 0 {
		t.Fatalf("bare container = %+v, %v", c, err)
	}
}

func TestWaitTimesOut(t *testing.T) {
	root := shortRoot(t)
	startServe(t, root)
	_, err := nodesim(t, "wait", "--root", root, "--resource", vf, "--timeout", "100ms")
	if err == nil || !strings.Contains(err.Error(), "device plugin example.com/vf not registered") {
		t.Fatalf("wait with no plugin: %v", err)
	}
}

// A script starts `nodesim serve` and its plugin, then `nodesim wait` at once (scripts/demo.sh,
// scripts/demo-dra.sh): on a busy machine wait runs before serve has made its control socket,
// and must wait for serve within its timeout rather than fail; so too where a killed nodesim
// left its control socket, which refuses until the new serve replaces it.
func TestWaitForStartingServe(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale socket %v", stale), func(t *testing.T) {
			root := shortRoot(t)
			if stale {
				leaveSocket(t, kubeletsim.ControlSocket(root))
			}
			waitBeforeServe(t, root)
		})
	}
	_, err := nodesim(t, "wait", "--root", shortRoot(t), "--resource", vf, "--timeout", "200ms")
	if err == nil || !strings.Contains(err.Error(), "control socket") || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("wait with no serve: %v", err)
	}
}

// leaveSocket makes a socket file no one listens on, as a killed process leaves it.
func leaveSocket(t *testing.T, path string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	lis.SetUnlinkOnClose(false)
	lis.Close()
}

func waitBeforeServe(t *testing.T, root string) {
	waited := make(chan error, 1)
	go func() {
		_, err := nodesim(t, "wait", "--root", root, "--resource", vf, "--timeout", "20s")
		waited <- err
	}()
	time.Sleep(500 * time.Millisecond) // serve starts late
	select {
	case err := <-waited:
		t.Fatalf("wait ended before serve started: %v", err)
	default:
	}
	startServe(t, root)
	plugin := kubeletsimtest.NewPlugin(t, kubeletsim.PluginDir(root), vf, "vf.sock", kubeletsimtest.Dev("d1", 0))
	plugin.Start(t.Context(), true)
	if err := <-waited; err != nil {
		t.Fatalf("wait started before serve: %v", err)
	}
}

// Every command's --help is its own, on stdout, with exit 0; so is --version.
func TestHelpAndVersionExitZero(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "nodesim serve --root DIR"},
		{[]string{"--version"}, "nodesim "},
		{[]string{"serve", "--help"}, "-plugin-grace-period"},
		{[]string{"pod", "--help"}, "nodesim pod add|del"},
		{[]string{"pod", "add", "-h"}, "-container"},
		{[]string{"pod", "del", "--help"}, "-namespace"},
		{[]string{"pods", "--help"}, "-root"},
		{[]string{"wait", "--help"}, "-resource"},
		{[]string{"drivers", "--help"}, "-root"},
		{[]string{"resources", "--help"}, "-root"},
		{[]string{"version", "--help"}, "nodesim "},
	} {
		out, err := nodesim(t, c.args...)
		var stdout bytes.Buffer
		code := exitCode(err, &stdout, &bytes.Buffer{})
		if code != 0 || !strings.Contains(out+stdout.String(), c.want) {
			t.Errorf("%v: exit %d, stdout %q, want it to contain %q", c.args, code, out+stdout.String(), c.want)
		}
	}
}

func TestDRAFlags(t *testing.T) {
	root := shortRoot(t)
	for _, args := range [][]string{
		{"serve", "--root", root, "--kubeconfig", "/nonexistent"},
		{"serve", "--root", root, "--node-name", "n1"},
		{"serve", "--root", root, "--kubeconfig", "/nonexistent", "--node-name", "Bad_Node"},
		{"pod", "add", "--root", root, "--namespace", "n", "--name", "p", "--claim", "net"},
		{"pod", "add", "--root", root, "--namespace", "n", "--name", "p", "--claim", "net=pool:x"},
		{"pod", "add", "--root", root, "--namespace", "n", "--name", "p", "--claim", "net=claim:"},
		{"pod", "add", "--root", root, "--namespace", "n", "--name", "p", "--container", "c=claim:"},
		{"wait", "--root", root, "--resource", vf, "--driver", "d.example.com"},
	} {
		if _, err := nodesim(t, args...); exitCode(err, &bytes.Buffer{}, &bytes.Buffer{}) != 2 {
			t.Errorf("nodesim %v: %v, want a usage error", args, err)
		}
	}
	_, err := nodesim(t, "serve", "--root", root, "--kubeconfig", filepath.Join(root, "none"), "--node-name", "n1")
	if err == nil || !strings.Contains(err.Error(), "kubeconfig") || exitCode(err, &bytes.Buffer{}, &bytes.Buffer{}) != 1 {
		t.Errorf("serve with a missing kubeconfig: %v", err)
	}
	startServe(t, root)
	_, err = nodesim(t, "pod", "add", "--root", root, "--namespace", "n", "--name", "p",
		"--container", "app=claim:net", "--claim", "net=template:t")
	if err == nil || !strings.Contains(err.Error(), "no API server") || exitCode(err, &bytes.Buffer{}, &bytes.Buffer{}) != 1 {
		t.Errorf("pod add --claim without --kubeconfig: %v", err)
	}
	out, err := nodesim(t, "drivers", "--root", root)
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("drivers without DRA = %q, %v", out, err)
	}
}

func TestParseContainerClaims(t *testing.T) {
	c, err := parseContainer("app=example.com/vf:1,claim:net,claim:gpu")
	if err != nil || len(c.Requests) != 1 || !slices.Equal(c.Claims, []string{"net", "gpu"}) {
		t.Fatalf("parseContainer = %+v, %v", c, err)
	}
	var cf claimFlag
	if err := cf.Set("net=template:vf"); err != nil {
		t.Fatal(err)
	}
	if err := cf.Set("d=claim:direct"); err != nil {
		t.Fatal(err)
	}
	want := claimFlag{{Name: "net", ResourceClaimTemplateName: "vf"}, {Name: "d", ResourceClaimName: "direct"}}
	if !slices.Equal(cf, want) {
		t.Errorf("claims %+v, want %+v", cf, want)
	}
}
