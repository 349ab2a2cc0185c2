package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/nodestate"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

const goodNetconf = `{"cniVersion":"1.0.0","name":"fast","type":"devplumb","resourceName":"example.com/veth","delegate":{"type":"host-device"}}`

func TestValidate(t *testing.T) {
	good := write(t, "good.json", `{"type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"client","path":"/run/v.sock"}}`)
	bad := write(t, "bad.json", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"01:00.0"},"vdpa":{}}`)
	missing := filepath.Join(t.TempDir(), "missing.json")
	nadYAML := write(t, "nad.yaml", "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: fast\nspec:\n  config: '"+goodNetconf+"'\n")
	typo := write(t, "typo.json", strings.Replace(goodNetconf, `"resourceName"`, `"resourcename"`, 1))
	noName := strings.Replace(goodNetconf, `"name":"fast",`, "", 1)
	nadNoName := write(t, "nad-noname.yaml", "kind: NetworkAttachmentDefinition\nmetadata:\n  name: fast\nspec:\n  config: '"+noName+"'\n")
	nadBadRes := write(t, "nad-badres.yaml", "kind: NetworkAttachmentDefinition\nmetadata:\n  name: fast\n  annotations:\n    k8s.v1.cni.cncf.io/resourceName: ../x\nspec:\n  config: '"+noName+"'\n")
	caseKey := write(t, "case.json", `{"Type":"vhost-user","type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"client","path":"/run/v.sock"}}`)
	cdiGood := write(t, "vendor.json", `{"cdiVersion":"0.5.0","kind":"example.com/veth","devices":[{"name":"veth1","containerEdits":{"env":["A=1"]}}]}`)
	cdiBad := write(t, "bad-cdi.json", `{"cdiVersion":"0.5.0","kind":"example.com/veth","devices":[{"name":"bad name!","containerEdits":{"env":["A=1"]}}]}`)

	cases := []struct {
		args     []string
		code     int
		outLines []string // substrings, one per expected output line
	}{
		{[]string{"validate", "devinfo", good}, 0, nil},
		{[]string{"validate", "devinfo", good, bad, missing}, 1, []string{bad + ": invalid device-info: pci.pci-address", missing + ": "}},
		{[]string{"validate", "netconf", nadYAML}, 0, nil},
		{[]string{"validate", "netconf", typo}, 1, []string{typo + ": ", "resourcename"}},
		{[]string{"validate", "cdi", cdiGood}, 0, nil},
		{[]string{"validate", "cdi", cdiBad}, 1, []string{cdiBad + ": "}},
		// Multus names a config after its NAD; the resourceName annotation is checked.
		{[]string{"validate", "netconf", nadNoName}, 0, nil},
		{[]string{"validate", "netconf", nadBadRes}, 1, []string{nadBadRes + ": ", "k8s.v1.cni.cncf.io/resourceName"}},
		{[]string{"validate", "devinfo", caseKey}, 1, []string{caseKey + `: invalid device-info: Type: keys are case-sensitive`}},
		{[]string{"validate", "nope", good}, 2, nil},
		{[]string{"validate", "devinfo"}, 2, nil},
	}
	for _, c := range cases {
		code, out, _ := runCmd(c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (out %q)", c.args, code, c.code, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if c.outLines == nil && out != "" {
			t.Errorf("%v: unexpected output %q", c.args, out)
		}
		if c.outLines != nil && !strings.Contains(out, c.outLines[0]) {
			t.Errorf("%v: output %q lacks %q", c.args, out, c.outLines[0])
		}
		if c.code == 1 && len(lines) != len(c.args)-2-countValid(c.args) {
			t.Errorf("%v: %d lines, want one per bad file: %q", c.args, len(lines), out)
		}
	}
}

func countValid(args []string) int {
	n := 0
	for _, a := range args {
		if strings.HasSuffix(a, "good.json") {
			n++
		}
	}
	return n
}

func TestInspectJSONAndGC(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	dir := t.TempDir()
	orphan := filepath.Join(dir, "devinfo", "cni", "x-c_net1")
	os.MkdirAll(filepath.Dir(orphan), 0o755)
	os.WriteFile(orphan, []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2"}}`), 0o644)
	flags := []string{"--devinfo-dir", filepath.Join(dir, "devinfo"), "--state-dir", filepath.Join(dir, "state"), "--pod-resources", srv.Socket}

	code, out, errOut := runCmd(append([]string{"inspect", "--json"}, flags...)...)
	if code != 1 {
		t.Fatalf("inspect with an unowned file: exit %d, want 1 (%s)", code, errOut)
	}
	var v nodestate.View
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("inspect --json output: %v\n%s", err, out)
	}
	if len(v.Files) != 1 || len(v.Problems) != 1 {
		t.Errorf("view %+v", v)
	}

	code, out, _ = runCmd(append([]string{"gc", "--orphans"}, flags...)...)
	if code != 0 || !strings.Contains(out, "removed file "+orphan) {
		t.Fatalf("gc: exit %d out %q", code, out)
	}
	if code, out, _ = runCmd(append([]string{"inspect"}, flags...)...); code != 0 || !strings.Contains(out, "Problems: 0") {
		t.Errorf("inspect after gc: exit %d\n%s", code, out)
	}
}

func TestPathFlags(t *testing.T) {
	code, _, errOut := runCmd("inspect", "--root", t.TempDir(), "--state-dir", t.TempDir())
	if code != 2 || !strings.Contains(errOut, "not both") {
		t.Errorf("--root with --state-dir: exit %d %q", code, errOut)
	}
	code, _, errOut = runCmd("gc", "--dry-run", "extra")
	if code != 2 || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("gc with an argument: exit %d %q", code, errOut)
	}
}

// The text view lists a pod's resources in a stable order, says "none" for
// empty sections, and gc says when there is nothing to do.
func TestInspectTextAndEmptyGC(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	srv.SetPod(&v1.PodResources{Namespace: "ns", Name: "p", Containers: []*v1.ContainerResources{{Name: "c",
		Devices: []*v1.ContainerDevices{{ResourceName: "z.com/b", DeviceIds: []string{"2"}}, {ResourceName: "a.com/a", DeviceIds: []string{"1"}}}}}})
	dir := t.TempDir()
	flags := []string{"--devinfo-dir", filepath.Join(dir, "devinfo"), "--state-dir", filepath.Join(dir, "state"), "--pod-resources", srv.Socket}
	for range 5 {
		code, out, _ := runCmd(append([]string{"inspect"}, flags...)...)
		want := "  ns/p  a.com/a: 1\n  ns/p  z.com/b: 2\nAttachments (state " + filepath.Join(dir, "state") + "):\n  none\n"
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("inspect: exit %d\n%s\nwant\n%s", code, out, want)
		}
	}
	if code, out, _ := runCmd(append([]string{"gc"}, flags...)...); code != 0 || out != "nothing to remove\n" {
		t.Errorf("gc on a clean node: exit %d %q", code, out)
	}
}

func TestValidateConflist(t *testing.T) {
	entry := `{"type":"devplumb","resourceName":"example.com/veth","delegate":{"type":"host-device"}}`
	good := write(t, "good.conflist", `{"cniVersion":"1.0.0","name":"fast","plugins":[`+entry+`,{"type":"tuning"}]}`)
	badEntry := write(t, "bad.conflist", `{"cniVersion":"1.0.0","name":"fast","plugins":[{"type":"tuning"},`+strings.Replace(entry, "resourceName", "resourcename", 1)+`]}`)
	noDevplumb := write(t, "none.conflist", `{"cniVersion":"1.0.0","name":"fast","plugins":[{"type":"bridge"}]}`)
	noName := write(t, "noname.conflist", `{"cniVersion":"1.0.0","plugins":[`+entry+`]}`)
	nad := write(t, "nad.yaml", "kind: NetworkAttachmentDefinition\nmetadata:\n  name: fast\nspec:\n  config: '{\"cniVersion\":\"1.0.0\",\"name\":\"fast\",\"plugins\":["+entry+"]}'\n")
	for _, c := range []struct {
		file, want string
		code       int
	}{
		{good, "", 0},
		{nad, "", 0},
		{badEntry, `conflist "fast": plugins[1]: `, 1},
		{noDevplumb, "no plugin of type devplumb", 1},
		{noName, "conflist: ", 1},
	} {
		code, out, _ := runCmd("validate", "netconf", c.file)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d %q, want %d and %q", filepath.Base(c.file), code, out, c.code, c.want)
		}
	}
}

func TestHelpAndVersionExitZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"--version"}, {"version"},
		{"validate", "--help"}, {"inspect", "--help"}, {"gc", "-h"}, {"metrics", "--help"}} {
		code, out, errOut := runCmd(args...)
		if code != 0 || out+errOut == "" {
			t.Errorf("%v: exit %d, output %q %q", args, code, out, errOut)
		}
	}
	if _, out, _ := runCmd("--version"); !strings.HasPrefix(out, "devplumbctl ") {
		t.Errorf("--version printed %q", out)
	}
}

// A relative --root finds the same files as the absolute path (state names
// absolute paths), and gc --json prints [] when there is nothing to do.
func TestRelativeRootAndGCJSON(t *testing.T) {
	root := t.TempDir()
	srv := podresourcestest.NewServer(t)
	os.MkdirAll(filepath.Join(root, "pod-resources"), 0o755)
	if err := os.Symlink(srv.Socket, filepath.Join(root, "pod-resources", "kubelet.sock")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(root))
	rel := filepath.Base(root)
	code, out, errOut := runCmd("inspect", "--json", "--root", rel)
	var v nodestate.View
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Paths.StateDir != filepath.Join(root, "devplumb") {
		t.Fatalf("inspect --root %s: exit %d paths %+v %s", rel, code, v.Paths, errOut)
	}
	code, out, errOut = runCmd("gc", "--json", "--root", rel)
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("gc --json on a clean node: exit %d %q %s", code, out, errOut)
	}
}

// inspect shows how long each step of an attachment's ADD took, as its record keeps it.
func TestInspectShowsPhases(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	srv.SetPod(&v1.PodResources{Namespace: "ns", Name: "p", Containers: []*v1.ContainerResources{{Name: "c",
		Devices: []*v1.ContainerDevices{{ResourceName: "a.com/a", DeviceIds: []string{"1"}}}}}})
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	rec := &attachment.Record{Key: attachment.Key{Network: "n", ContainerID: "c1", IfName: "net1"},
		Pod: attachment.Pod{Namespace: "ns", Name: "p"}, ResourceName: "a.com/a", DeviceID: "1", Complete: true,
		Phases: []attachment.Phase{{Name: "config", Duration: 85 * time.Microsecond}, {Name: "delegate", Duration: 12 * time.Millisecond}}}
	if err := attachment.New(state).Put(rec); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--devinfo-dir", filepath.Join(dir, "devinfo"), "--state-dir", state, "--pod-resources", srv.Socket}
	code, out, errOut := runCmd(append([]string{"inspect"}, flags...)...)
	if code != 0 || !strings.Contains(out, "    ADD took: config 85µs, delegate 12ms\n") {
		t.Fatalf("inspect: exit %d\n%s%s", code, out, errOut)
	}
	_, out, _ = runCmd(append([]string{"inspect", "--json"}, flags...)...)
	var v nodestate.View
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Attachments) != 1 ||
		len(v.Attachments[0].Phases) != 2 || v.Attachments[0].Phases[1].Duration != 12*time.Millisecond {
		t.Errorf("inspect --json: %v\n%s", err, out)
	}
}

// inspect, gc and validate never block on a state record or input that is a
// FIFO or a link to /dev/zero; inspect and validate name each one.
func TestHostileFilesDoNotHang(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	dir := t.TempDir()
	att := filepath.Join(dir, "state", "attachments")
	if err := os.MkdirAll(att, 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(att, "net:c1:net1.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(att, "net:c2:net1.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--devinfo-dir", filepath.Join(dir, "devinfo"), "--state-dir", filepath.Join(dir, "state"), "--pod-resources", srv.Socket}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, args := range [][]string{
		append([]string{"inspect"}, flags...),
		append([]string{"gc", "--dry-run"}, flags...),
		{"validate", "devinfo", fifo, "/dev/zero"},
	} {
		done := make(chan [2]string, 1)
		go func() { _, out, errOut := runCmd(args...); done <- [2]string{out, errOut} }()
		select {
		case got := <-done:
			all := got[0] + got[1]
			named := strings.Contains(all, fifo) && (args[0] == "validate" || strings.Contains(all, zero))
			if args[0] != "gc" && !named { // gc passes over them silently
				t.Errorf("devplumbctl %s does not name the hostile files:\n%s", args[0], all)
			}
		case <-ctx.Done():
			t.Fatalf("devplumbctl %s did not return", args[0])
		}
	}
}

// inspect reports a device plugin file filed under one PCI device that
// describes another.
func TestInspectReportsMisfiledDeviceInfo(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	dir := t.TempDir()
	misfiled := filepath.Join(dir, "devinfo", "dp", "example.com-vf-0000:01:00.1-device.json")
	os.MkdirAll(filepath.Dir(misfiled), 0o755)
	os.WriteFile(misfiled, []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:00.2"}}`), 0o644)
	flags := []string{"--devinfo-dir", filepath.Join(dir, "devinfo"), "--state-dir", filepath.Join(dir, "state"), "--pod-resources", srv.Socket}
	code, out, errOut := runCmd(append([]string{"inspect"}, flags...)...)
	if code != 1 || !strings.Contains(out, misfiled+": device-info filed under device 0000:01:00.1 describes PCI device 0000:01:00.2") {
		t.Errorf("inspect: exit %d\n%s%s", code, out, errOut)
	}
}

// inspect names the ResourceClaim device a DRA attachment holds, in text and JSON, and a
// DRA attachment of a pod the kubelet lists is no problem.
func TestInspectShowsClaim(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	srv.SetPod(&v1.PodResources{Namespace: "ns", Name: "p", Containers: []*v1.ContainerResources{{Name: "c"}}})
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	claim := &attachment.ClaimDevice{Namespace: "ns", Name: "p-net-x7k2q", Driver: "netdev.devplumb.io", Pool: "node1", Device: "vf-1"}
	rec := &attachment.Record{Key: attachment.Key{Network: "n", ContainerID: "c1", IfName: "net1"},
		Pod: attachment.Pod{Namespace: "ns", Name: "p"}, ResourceName: "a.com/a", DeviceID: "0000:01:00.1", Complete: true, Claim: claim}
	if err := attachment.New(state).Put(rec); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--devinfo-dir", filepath.Join(dir, "devinfo"), "--state-dir", state, "--pod-resources", srv.Socket}
	code, out, errOut := runCmd(append([]string{"inspect"}, flags...)...)
	if code != 0 || !strings.Contains(out, "    DRA: ResourceClaim ns/p-net-x7k2q device netdev.devplumb.io/node1/vf-1") {
		t.Fatalf("inspect: exit %d\n%s%s", code, out, errOut)
	}
	_, out, _ = runCmd(append([]string{"inspect", "--json"}, flags...)...)
	var v nodestate.View
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Attachments) != 1 || v.Attachments[0].Claim == nil || *v.Attachments[0].Claim != *claim {
		t.Errorf("inspect --json: %v\n%s", err, out)
	}
}

// inspect says it cannot look, and exits 2 (not 1, "problems found"), when the
// kubelet's PodResources socket is missing; it still shows the state it read.
func TestInspectWithoutKubeletExitsTwo(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "pod-resources", "kubelet.sock")
	flags := []string{"--devinfo-dir", filepath.Join(dir, "devinfo"), "--state-dir", filepath.Join(dir, "state"), "--pod-resources", socket}
	for _, args := range [][]string{append([]string{"inspect"}, flags...), append([]string{"inspect", "--json"}, flags...)} {
		code, out, errOut := runCmd(args...)
		if code != 2 || !strings.Contains(errOut, "cannot ask the kubelet's PodResources API at "+socket) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message naming the socket", args, code, errOut)
		}
		if !strings.Contains(out, filepath.Join(dir, "state")) {
			t.Errorf("%v: the view is not printed:\n%s", args, out)
		}
	}
}

// validate netconf names a plain plugin config for what it is: not devplumb's.
func TestValidateNetconfOfAnotherPlugin(t *testing.T) {
	bridge := write(t, "bridge.json", `{"cniVersion":"1.0.0","name":"br","type":"bridge","bridge":"cni0"}`)
	nad := write(t, "nad.yaml", "kind: NetworkAttachmentDefinition\nmetadata:\n  name: br\nspec:\n  config: '{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}'\n")
	for _, f := range []string{bridge, nad} {
		code, out, _ := runCmd("validate", "netconf", f)
		if code != 1 || !strings.Contains(out, `not a devplumb config: its type is "bridge"`) || strings.Contains(out, "no delegate") {
			t.Errorf("%s: exit %d %q, want 1 and \"not a devplumb config\" naming type bridge", filepath.Base(f), code, out)
		}
	}
}
