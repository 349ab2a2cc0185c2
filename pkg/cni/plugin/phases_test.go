package plugin

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
)

// A completed ADD keeps the time of each of its steps in its state record, and ADD and
// DEL log them at debug level, in the form `make bench` parses.
func TestPhasesRecordedAndLogged(t *testing.T) {
	k := newKubeEnv(t)
	var logs bytes.Buffer
	k.p.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := k.p.Add(k.args()); err != nil {
		t.Fatal(err)
	}
	recs := k.records()
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	names := make([]string, 0, len(recs[0].Phases))
	for _, ph := range recs[0].Phases {
		names = append(names, ph.Name)
		if ph.Duration < 0 {
			t.Errorf("phase %s: negative duration %s", ph.Name, ph.Duration)
		}
	}
	want := []string{"config", "podResources", "claim", "deviceInfo", "delegate", "networkStatus"}
	if !slices.Equal(names, want) {
		t.Errorf("recorded phases %v, want %v", names, want)
	}
	if err := k.p.Del(k.args()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"msg=phases op=ADD config=", " delegate=", " state=", " kube=", "msg=phases op=DEL config="} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

func TestPhasesMarkAddsUpRepeatedSteps(t *testing.T) {
	p := startPhases()
	p.mark("claim").mark("delegate").mark("claim")
	got := p.recorded()
	if len(got) != 2 || got[0].Name != "claim" || got[1].Name != "delegate" {
		t.Fatalf("phases %+v", got)
	}
	got[0] = attachment.Phase{Name: "changed"}
	if p.list[0].Name != "claim" {
		t.Error("recorded shares the timer's list")
	}
}

// A network's logLevel, logFile and logToStderr (Multus's keys) decide where
// and how much each call logs; calls of other networks are not affected.
func TestPerNetworkLogControl(t *testing.T) {
	k := newKubeEnv(t)
	var stderr bytes.Buffer
	k.p.LogTo = &stderr
	logFile := filepath.Join(t.TempDir(), "devplumb.log")
	k.conf["logLevel"] = "debug"
	k.conf["logFile"] = logFile
	k.conf["logToStderr"] = false
	if err := k.p.Add(k.args()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(data), "level=DEBUG msg=phases network=fast-net op=ADD") {
		t.Fatalf("logFile: %v\n%s", err, data)
	}
	if stderr.Len() != 0 {
		t.Errorf("logToStderr false, but stderr got:\n%s", stderr.String())
	}
	delete(k.conf, "logLevel")
	delete(k.conf, "logFile")
	delete(k.conf, "logToStderr")
	if err := k.p.Del(k.args()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr.String(), "level=DEBUG") {
		t.Errorf("default level logged debug:\n%s", stderr.String())
	}
	if after, _ := os.ReadFile(logFile); len(after) != len(data) {
		t.Error("a call of the network without logFile wrote to the file")
	}
}

// A logFile that is a link is not followed (a root process must not append
// to a file of someone else's choosing); the call still succeeds and says so.
func TestLogFileLinkRefused(t *testing.T) {
	k := newKubeEnv(t)
	var stderr bytes.Buffer
	k.p.LogTo = &stderr
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "devplumb.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	k.conf["logFile"] = link
	k.conf["logLevel"] = "debug"
	if err := k.p.Add(k.args()); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(target); len(data) != 0 {
		t.Errorf("the link's target was written: %s", data)
	}
	if !strings.Contains(stderr.String(), "logFile "+link) {
		t.Errorf("stderr does not say the logFile was refused:\n%s", stderr.String())
	}
}
