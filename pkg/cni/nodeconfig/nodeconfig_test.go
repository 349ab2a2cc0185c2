package nodeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.json")
	n, err := Load(path)
	if err != nil || *n != *Defaults() || n.StateDir != DefaultStateDir {
		t.Fatalf("missing file: %v %+v, want the defaults", err, n)
	}
	must(t, os.WriteFile(path, []byte(`{"kubeconfig":"/etc/k/kc","stateDir":"/s","trustDeviceID":true}`), 0o644))
	n, err = Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Node{Kubeconfig: "/etc/k/kc", StateDir: "/s", TrustDeviceID: true,
		PodResourcesSocket: DefaultPodResourcesSocket, DeviceInfoDir: DefaultDeviceInfoDir}
	if *n != want || n.CacheDir("net") != "/s/libcni/net" {
		t.Fatalf("got %+v, want %+v", *n, want)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	must(t, syscall.Mkfifo(fifo, 0o600))
	for _, tc := range []struct{ name, data, want string }{
		{"typo", `{"kubeconfg":"/k"}`, `unknown field "kubeconfg"`},
		{"relative", `{"stateDir":"state"}`, `"stateDir" "state" must be an absolute path`},
		{"unclean", `{"kubeconfig":"/etc//k"}`, `"kubeconfig" "/etc//k" must be a clean path`},
		{"dotdot", `{"deviceInfoDir":"/var/../etc"}`, `must be a clean path`},
		{"not a log", `{"logFile":"/etc/cron.d/x"}`, `must end in ".log"`},
		{"two objects", `{}{}`, `trailing data`},
		{"not json", `kubeconfig: /k`, `not a node config`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".json")
			must(t, os.WriteFile(path, []byte(tc.data), 0o644))
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want one naming %s and saying %q", err, path, tc.want)
			}
		})
	}
	if _, err := Load(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO: %v", err)
	}
	if _, err := Load("relative/node.json"); err == nil {
		t.Error("a relative node config path was accepted")
	}
}

func TestPath(t *testing.T) {
	t.Setenv(Env, "")
	if Path() != DefaultPath {
		t.Errorf("Path() = %q without %s, want %s", Path(), Env, DefaultPath)
	}
	t.Setenv(Env, "/x/node.json")
	if Path() != "/x/node.json" {
		t.Errorf("Path() = %q", Path())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
