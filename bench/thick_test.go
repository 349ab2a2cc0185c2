package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// The in-cluster file system multus-daemon is started in: the token and CA where
// client-go's in-cluster config reads them, the host's network namespaces still visible,
// the API server in the environment, and nothing left on the host.
func TestInClusterCmd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount namespace)")
	}
	if _, err := os.Stat("/var/run/secrets"); err == nil {
		t.Skip("/var/run/secrets exists on this host: cannot tell the namespace's from the host's")
	}
	dir := t.TempDir()
	ca := filepath.Join(dir, "server.crt")
	if err := os.WriteFile(ca, []byte("CA-PEM"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A host netns of this test's own, which the namespace must list: a count of them all
	// would race with the other packages' tests making and removing theirs.
	netns := filepath.Base(testenv.NetNS(t).Path())
	script := `cat ` + serviceAccountDir + `/token; echo; cat ` + serviceAccountDir + `/ca.crt; echo
echo "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; ls /run/netns | grep -cx ` + netns
	c, err := inClusterCmd(filepath.Join(dir, "ns"), "https://127.0.0.1:6443", "secret-token", ca, "sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := strings.Join([]string{"secret-token", "CA-PEM", "127.0.0.1:6443", "1"}, " ")
	if got := strings.Join(strings.Fields(string(out)), " "); got != want {
		t.Errorf("inside the namespace: %q, want %q", got, want)
	}
	if _, err := os.Stat("/var/run/secrets"); !os.IsNotExist(err) {
		t.Errorf("the host's /var/run/secrets after the run: %v", err)
	}
	if _, err := inClusterCmd(dir, "127.0.0.1", "t", ca, "true"); err == nil {
		t.Error("an API server URL without a port was accepted")
	}
}

// The P1 table's Multus thick column and the note saying why a row is missing.
func TestP1TableThick(t *testing.T) {
	vs := []*variant{{label: "floor", net: "floor", ms: []float64{100, 100, 100}},
		{label: "thin", net: "multus", ms: []float64{200, 200, 200}},
		{label: thickLabel, net: "multusthick", ms: []float64{150, 150, 150}},
		{label: "dp", net: "dp", ms: []float64{125, 125, 125}}}
	tab := p1Table(vs, Config{Multus: "m", MultusThick: "d", kube: &kubeNode{}})
	if got := tab.Rows[3][4:]; got[0] != "0.25" || got[1] != "0.50" {
		t.Errorf("devplumb ÷ thin, ÷ thick: %v", got)
	}
	if got := tab.Rows[0][4:]; got[0] != "–" || got[1] != "–" {
		t.Errorf("floor ratios: %v", got)
	}
	tab = p1Table(vs[:2], Config{Multus: "m", MultusThick: "d"})
	if got := tab.Rows[1][5]; got != "–" {
		t.Errorf("÷ thick without a thick row: %q", got)
	}
	if notes := strings.Join(tab.Notes, "\n"); !strings.Contains(notes, "Multus thick not run: multus-daemon needs a kube-apiserver") {
		t.Errorf("notes lack why thick did not run:\n%s", notes)
	}
}
