package plugin

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/claims"
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
	recs := k.claims()
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
	got[0] = claims.Phase{Name: "changed"}
	if p.list[0].Name != "claim" {
		t.Error("recorded shares the timer's list")
	}
}
