package dra_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// The nodesim command line with DRA: serve --kubeconfig/--node-name, wait
// --driver, pod add --claim, a restart of serve, pods, pod del.
func TestNodesimDRACommandLine(t *testing.T) {
	const node = "cli-node"
	bin := filepath.Join(testenv.Build(t, "./cmd/nodesim"), "nodesim")
	root, err := os.MkdirTemp("", "ns")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	t.Cleanup(func() { simDeleteNode(node) })
	serve := func() *kubeapi.Proc {
		p, err := kubeapi.Spawn(root, "nodesim", bin, "serve", "--root", root, "--kubeconfig", srv.Kubeconfig, "--node-name", node)
		if err != nil {
			t.Fatal(err)
		}
		simWaitServing(t, root, p)
		return p
	}
	p := serve()
	defer func() { p.Terminate(10 * time.Second) }()
	d := simStartDriver(t, root, node, simDriverName, []string{"dev0", "dev1"})
	ns := simNamespace(t, "nodesim-cli")
	simDeviceClass(t, "nodesim-cli", simDriverName)
	simTemplate(t, ns, "net", "nodesim-cli", 1)
	simCLI(t, bin, "wait", "--root", root, "--driver", simDriverName)

	out := simCLI(t, bin, "pod", "add", "--root", root, "--namespace", ns, "--name", "web",
		"--claim", "net=template:net", "--container", "app=claim:net", "--container", "side")
	var alloc kubeletsim.PodAllocation
	if err := json.Unmarshal([]byte(out), &alloc); err != nil {
		t.Fatalf("pod add output %q: %v", out, err)
	}
	if len(alloc.Claims) != 1 || !strings.HasPrefix(alloc.Claims[0].Name, "web-net-") || len(alloc.Claims[0].Devices) != 1 {
		t.Fatalf("pod add printed claims %+v", alloc.Claims)
	}
	if api, ok := simGetPod(t, ns, "web"); !ok || string(api.UID) != alloc.UID {
		t.Fatalf("Pod object %v (found %v), nodesim UID %s", api, ok, alloc.UID)
	}

	// Restart: the claim is still there, the driver registers again.
	p.Terminate(10 * time.Second)
	p = serve()
	simCLI(t, bin, "wait", "--root", root, "--driver", simDriverName)
	if out := simCLI(t, bin, "drivers", "--root", root); !strings.Contains(out, `"driver": "`+simDriverName+`"`) {
		t.Errorf("drivers after restart: %s", out)
	}
	if out := simCLI(t, bin, "pods", "--root", root); !strings.Contains(out, alloc.Claims[0].Name) {
		t.Errorf("pods after restart lacks the claim: %s", out)
	}
	simCLI(t, bin, "pod", "del", "--root", root, "--namespace", ns, "--name", "web")
	if prepared, _, unprepared := d.state(); len(prepared) != 0 || len(unprepared) != 1 {
		t.Errorf("after pod del: prepared %v unprepared %v", prepared, unprepared)
	}
	if _, ok := simGetPod(t, ns, "web"); ok || len(simClaimsIn(t, ns)) != 0 {
		t.Errorf("pod del left the Pod object (%v) or claims %v", ok, simClaimNames(simClaimsIn(t, ns)))
	}

	// A bad claim: exit 1 and a message naming it.
	cmd := exec.Command(bin, "pod", "add", "--root", root, "--namespace", ns, "--name", "bad", "--claim", "x=claim:nope", "--container", "app")
	msg, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(msg), "ResourceClaim nodesim-cli/nope not found") {
		t.Errorf("pod add with an unknown claim: exit %d (%v): %s", code, err, msg)
	}
}

func simCLI(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(e2etest.Ctx(t), bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nodesim %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// waitFile waits for a file the process creates when ready.
// simWaitServing waits until the nodesim serve p answers on its control socket, which
// it makes first and serves once its other sockets are up. Not kubelet.sock: a stopped
// kubelet (and nodesim) leaves it behind.
func simWaitServing(t *testing.T, root string, p *kubeapi.Proc) {
	t.Helper()
	simWaitFile(t, kubeletsim.ControlSocket(root), p, root)
	c, err := kubeletsim.NewControlClient(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pods(e2etest.Ctx(t)); err != nil {
		log, _ := os.ReadFile(filepath.Join(root, "nodesim.log"))
		t.Fatalf("nodesim serve does not answer: %v\n%s", err, log)
	}
}

func simWaitFile(t *testing.T, path string, p *kubeapi.Proc, logDir string) {
	t.Helper()
	c := e2etest.Ctx(t)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if done, err := p.Exited(); done {
			log, _ := os.ReadFile(filepath.Join(logDir, "nodesim.log"))
			t.Fatalf("nodesim serve exited (%v):\n%s", err, log)
		}
		select {
		case <-c.Done():
			t.Fatalf("%s did not appear: %v", path, c.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
