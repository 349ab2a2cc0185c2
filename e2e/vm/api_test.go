package vm

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// guestKubeconfig is the path in the initramfs of the kubeconfig for the host's
// kube-apiserver (e2e/vm/guest's GuestKubeconfig).
const guestKubeconfig = "devplumb/kubeconfig"

// guestHost is the host as the guest sees it on QEMU's user network (slirp): a
// connection to it reaches the host's loopback, where the API server listens.
const guestHost = "10.0.2.2"

// apiTests are the guest tests that need the API server: with DEVPLUMB_VM_RUN
// matching none of them, none is started.
var apiTests = []string{"TestDRAClaimGetsAVF"}

// hostAPI is an etcd and kube-apiserver (e2e/kubeapi) started on the host for the
// guest's DRA tests.
type hostAPI struct {
	done chan struct{}
	srv  *kubeapi.Server
	err  error
}

// startAPIServer starts the API server in the background unless run (the guest tests'
// -test.run) selects no test that needs it; the test's end stops it.
func startAPIServer(t *testing.T, dir, run string) *hostAPI {
	a := &hostAPI{done: make(chan struct{})}
	if !selectsAny(run, apiTests) {
		close(a.done)
		return a
	}
	go func() {
		defer close(a.done)
		a.srv, a.err = kubeapi.Start(filepath.Join(dir, "api"))
	}()
	t.Cleanup(func() {
		<-a.done
		if a.srv != nil {
			a.srv.Close()
		}
	})
	return a
}

// guestKubeconfig waits for the API server and returns a kubeconfig for it as the
// guest reaches it; "" when none was started.
func (a *hostAPI) guestKubeconfig() (string, error) {
	<-a.done
	if a.err != nil || a.srv == nil {
		return "", a.err
	}
	u, err := url.Parse(a.srv.URL)
	if err != nil {
		return "", fmt.Errorf("API server URL %q: %w", a.srv.URL, err)
	}
	return kubeapi.Kubeconfig("https://"+guestHost+":"+u.Port(), a.srv.Token), nil
}

// selectsAny reports whether the -test.run pattern run ("" for all) selects one of the
// top-level tests (its first /-separated part is matched against their names).
func selectsAny(run string, tests []string) bool {
	if run == "" {
		return true
	}
	re, err := regexp.Compile(strings.Split(run, "/")[0])
	if err != nil {
		return true // the guest's go test says what is wrong with it
	}
	for _, name := range tests {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// write adds a file of the given content at path in the tree.
func (s stage) write(path, content string) error {
	dst := filepath.Join(s.dir, path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := os.WriteFile(dst, []byte(content), 0o600); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return nil
}

// The API server starts only when the guest's -test.run selects a test that needs it.
func TestSelectsAny(t *testing.T) {
	for _, c := range []struct {
		run  string
		want bool
	}{
		{"", true}, {"^TestDRAClaimGetsAVF$", true}, {"DRA|Health", true}, {"^TestDRA.*$/sub", true},
		{"^TestHealthFollowsKernelEvents$", false}, {"TestSRIOV", false},
	} {
		if got := selectsAny(c.run, apiTests); got != c.want {
			t.Errorf("selectsAny(%q) = %v, want %v", c.run, got, c.want)
		}
	}
}
