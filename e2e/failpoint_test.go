package e2e

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/devplumb/devplumb/pkg/base/failpoint"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// The failpoints between the steps of ADD and of DEL (see pkg/cni/plugin).
var (
	addFailpoints = []string{"add-claimed", "add-recorded", "add-devinfo-copied", "add-delegated", "add-completed"}
	delFailpoints = []string{"del-delegated", "del-file-removed"}
)

// devplumb killed (SIGKILL) at each step of ADD, then DEL, ADD then DEL, or
// GC, leaves nothing: no claim, no CNI file, no libcni cache entry, the device
// back on the host and out of the pod. Killed at each step of DEL, the DEL
// run again does the same.
func TestKilledAtEachStep(t *testing.T) {
	type plan struct{ killAt, then string }
	var plans []plan
	for _, fp := range addFailpoints {
		plans = append(plans, plan{fp, "DEL"}, plan{fp, "ADD+DEL"}, plan{fp, "GC"})
	}
	for _, fp := range delFailpoints {
		plans = append(plans, plan{fp, "DEL"})
	}
	for _, p := range plans {
		t.Run(p.killAt+" then "+p.then, func(t *testing.T) {
			e := newEnv(t)
			e.exe = filepath.Join(testenv.BuildTagged(t, "failpoints", "./cmd/devplumb"), "devplumb")
			dev, pod, conf, args := e.hostDevicePod("0000:01:02.6")
			stdin := mustJSON(t, conf)
			if p.killAt[:3] == "del" {
				if _, ce := e.run("ADD", stdin, "c1", pod.Path(), "net1", args); ce != nil {
					t.Fatalf("ADD: %+v", ce)
				}
				e.runKilledAt(p.killAt, "DEL", stdin, pod.Path(), args)
			} else {
				e.runKilledAt(p.killAt, "ADD", stdin, pod.Path(), args)
			}
			if p.then == "ADD+DEL" {
				if _, ce := e.run("ADD", stdin, "c1", pod.Path(), "net1", args); ce != nil {
					t.Fatalf("ADD after the kill: %+v", ce)
				}
				if !linkIn(t, pod, "net1") {
					t.Fatal("ADD after the kill: the device is not in the pod")
				}
			}
			if p.then == "GC" {
				// GC with no valid attachment: as after a node crash.
				conf["cniVersion"] = "1.1.0"
				if _, ce := e.run("GC", mustJSON(t, conf), "", "", "", ""); ce != nil {
					t.Fatalf("GC after the kill: %+v", ce)
				}
			} else if _, ce := e.run("DEL", stdin, "c1", pod.Path(), "net1", args); ce != nil {
				t.Fatalf("DEL after the kill: %+v", ce)
			}
			e.assertNoAttachments(t, p.killAt)
			if linkIn(t, pod, "net1") || !hostLink(dev) {
				t.Errorf("the device is not back on the host")
			}
			if ents, _ := os.ReadDir(filepath.Join(e.stateDir, "libcni", "fast-net", "results")); len(ents) != 0 {
				t.Errorf("libcni cache left: %v", ents)
			}
		})
	}
}

// runKilledAt runs devplumb with the failpoint fp armed and checks that it
// died there, by SIGKILL.
func (e *env) runKilledAt(fp, cmd string, stdin []byte, netns, args string) {
	e.t.Helper()
	if !failpoint.Enabled && e.exe == "" {
		e.t.Fatal("no failpoints build")
	}
	e.extraEnv = []string{failpoint.Env + "=" + fp}
	defer func() { e.extraEnv = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), runBound)
	defer cancel()
	c, out, errOut := e.command(ctx, cmd, stdin, "c1", netns, "net1", args)
	err := c.Run()
	st, _ := c.ProcessState.Sys().(syscall.WaitStatus)
	if ctx.Err() != nil || !st.Signaled() || st.Signal() != syscall.SIGKILL {
		e.t.Fatalf("%s with failpoint %s: %v, want death by SIGKILL\nstdout: %s\nstderr: %s", cmd, fp, err, out, errOut)
	}
}
