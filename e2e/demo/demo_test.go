// Package demo runs `make demo` as CI would and checks that it works, that it
// can run twice in a row, and that it leaves nothing behind, even when
// interrupted half way.
package demo

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/testenv"
)

func makeDemo() *exec.Cmd { return makeTarget("demo") }

func makeTarget(target string) *exec.Cmd {
	cmd := exec.Command("make", "--no-print-directory", target)
	cmd.Dir = testenv.ModuleRoot()
	return cmd
}

// make demo-dra shows the DRA path end to end (slices, the claim's allocation, the
// device in the pod, network-status and the claim's networkData, both gone after DEL)
// and leaves nothing: no netns, link, process, API server or file.
func TestDemoDRA(t *testing.T) {
	out, err := makeTarget("demo-dra").CombinedOutput()
	if err != nil {
		t.Fatalf("make demo-dra: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{
		`"k8s.cni.cncf.io/resourceName"`,               // the slice's attributes
		`"cdiDeviceIDs"`, `"example.com/hostdev=dpdra`, // nodesim pod add: prepared
		"net1", "10.77.1.2/24", // the interface in the pod
		`\"name\": \"fast-dra\"`,                              // network-status entry
		`"interfaceName": "net1"`, `"reason": "NetworkReady"`, // the claim's networkData
		"status.devices after DEL:\nnull",
		// the device-plugin pod spec (example.com/hostdev: 2) through the scheduler's claim
		`"resourceClaimName": "web2-extended-resources-`, `"resource.kubernetes.io/extended-resource-claim": "true"`,
		`"interfaceName": "net2"`, "extended-resource claim's status.devices after DEL:\nnull",
		"demo-dra done: all clean",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q\n%s", want, s)
		}
	}
	if lines := okLines(s); len(lines) < 10 {
		t.Errorf("verdicts %v", lines)
	}
	assertNothingLeft(t)
}

// okLines are the demo's verdicts, free of temp dir names, to compare runs.
func okLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ok: ") || strings.HasPrefix(l, "LEFT: ") {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestDemoRunsTwiceAndLeavesNothing(t *testing.T) {
	var first []string
	for run := 1; run <= 2; run++ {
		out, err := makeDemo().CombinedOutput()
		if err != nil {
			t.Fatalf("make demo run %d: %v\n%s", run, err, out)
		}
		s := string(out)
		for _, want := range []string{
			"demo done: all clean",
			`"example.com/veth"`,         // pod add output: the allocation
			"net-fast-a", "10.77.1.2/24", // interfaces with their IPs in the pod netns
			"10.77.2.2/24", "10.77.3.2/24",
			`"type": "vhost-user"`, // a device-info file flowed
			`"cdiVersion"`,         // the CDI spec was shown
			"network-status entry",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("run %d: output lacks %q\n%s", run, want, s)
			}
		}
		lines := okLines(s)
		if run == 1 {
			first = lines
		} else if strings.Join(lines, "\n") != strings.Join(first, "\n") {
			t.Errorf("second run differs:\n%v\nvs\n%v", lines, first)
		}
		assertNothingLeft(t)
	}
}

func TestDemoInterruptedCleansUp(t *testing.T) {
	cmd := makeDemo()
	pr, pw, _ := os.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	// make forwards nothing: signal the whole process group, as Ctrl-C does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var out bytes.Buffer
	sc := bufio.NewScanner(pr)
	interrupted := false
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		// Interrupt with the pod netns made and one attachment added.
		if !interrupted && strings.Contains(sc.Text(), "cnitool add fast-b") {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			interrupted = true
		}
	}
	err := cmd.Wait()
	if !interrupted {
		t.Fatalf("demo never reached its second ADD:\n%s", out.String())
	}
	if err == nil {
		t.Errorf("interrupted demo exited 0")
	}
	assertNothingLeft(t)
}

var demoLink = regexp.MustCompile(`(?m)^\d+: (dpdemo|dpdra)`)

func assertNothingLeft(t *testing.T) {
	t.Helper()
	// The daemons are gone once the script returns; give the kernel a moment
	// to finish deleting links of a netns that was just removed.
	deadline := time.Now().Add(5 * time.Second)
	for {
		problems := leftovers()
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %v", problems)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func leftovers() []string {
	var p []string
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "devplumb-demo") {
		p = append(p, "netns devplumb-demo")
	}
	if out, _ := exec.Command("ip", "-o", "link", "show").Output(); demoLink.Match(out) {
		p = append(p, "dpdemo* links")
	}
	for _, g := range []string{"/tmp/devplumb-demo.*", "/tmp/devplumb-demo-dra.*"} {
		if dirs, _ := filepath.Glob(g); len(dirs) > 0 {
			p = append(p, "demo root "+strings.Join(dirs, " "))
		}
	}
	// Every daemon of the demo has its root in its command line.
	if out, _ := exec.Command("pgrep", "-af", "/tmp/devplumb-demo(-dra)?[.]").Output(); len(out) > 0 {
		p = append(p, "daemons still running: "+string(out))
	}
	if ents, _ := os.ReadDir(testenv.CnitoolResults); len(ents) > 0 {
		for _, e := range ents {
			if demoCache.MatchString(e.Name()) {
				p = append(p, "cnitool result cache "+e.Name())
			}
		}
	}
	return p
}

var demoCache = regexp.MustCompile(`^(fast-a|fast-b|vhost-net|fast-dra)-cnitool-`)

// A step that fails (here the second ADD, in its delegate) stops the demo
// with a non-zero exit that names the step and shows the daemons' logs, and
// the clean-up undoes the first attachment and everything else.
func TestDemoFailedStepCleansUp(t *testing.T) {
	bin := failingBin(t)
	cmd := exec.Command(filepath.Join(testenv.ModuleRoot(), "scripts", "demo.sh"))
	cmd.Env = append(os.Environ(), "DEMO_BIN="+bin)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("demo with a failing delegate exited 0:\n%s", out)
	}
	for _, want := range []string{"injected failure for net-fast-b", `demo: stopped during step "3.`, "--- last lines of nodesim.log"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "demo done") {
		t.Errorf("a failed demo says it is done:\n%s", out)
	}
	assertNothingLeft(t)
}

// failingBin is a DEMO_BIN of freshly built binaries whose host-device
// fails the ADD of interface net-fast-b.
func failingBin(t *testing.T) string {
	built := testenv.Build(t, "./cmd/devplumb", "./cmd/devplumbctl", "./cmd/netdev-dp", "./cmd/nodesim", "./scripts/vswitch")
	testenv.CNIPlugins(t)
	bin := t.TempDir()
	if err := os.Mkdir(filepath.Join(bin, "cni"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := func(name, dir string) {
		if err := os.Symlink(filepath.Join(built, name), filepath.Join(bin, dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"devplumb", "devplumb-direct", "devplumbctl", "netdev-dp", "nodesim", "vswitch"} {
		link(n, "")
	}
	for _, n := range []string{"cnitool", "macvlan", "static"} {
		link(n, "cni")
	}
	script := `#!/bin/sh
if [ "$CNI_COMMAND" = ADD ] && [ "$CNI_IFNAME" = net-fast-b ]; then
	echo '{"cniVersion":"1.0.0","code":999,"msg":"injected failure for net-fast-b"}'
	exit 1
fi
exec ` + filepath.Join(built, "host-device") + ` "$@"` + "\n"
	if err := os.WriteFile(filepath.Join(bin, "cni", "host-device"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
