// Package multus runs real Multus thin (built by scripts/build-multus.sh) against a real
// kube-apiserver, with devplumb as the delegate of a NetworkAttachmentDefinition.
package multus_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// EnvMultus names the Multus thin binary; scripts/build-multus.sh prints it.
const EnvMultus = "DEVPLUMB_MULTUS"

// MultusVersion is what scripts/build-multus.sh builds by default.
const MultusVersion = "v4.2.3"

var srv *kubeapi.Server

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "devplumb-multus-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if _, err := multusBin(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	srv, err = kubeapi.Start(filepath.Join(dir, "server"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: start API server:", err)
		return 1
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := srv.InstallNADCRD(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	return m.Run()
}

// multusBin is $DEVPLUMB_MULTUS, else the binary scripts/build-multus.sh left in its cache.
func multusBin() (string, error) {
	p := os.Getenv(EnvMultus)
	if p == "" {
		cache := os.Getenv("DEVPLUMB_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("multus: %s not set and no home directory: %w", EnvMultus, err)
			}
			cache = filepath.Join(home, ".cache", "devplumb")
		}
		p = filepath.Join(cache, "bin", "multus-"+MultusVersion)
	}
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("multus: %w; build it with scripts/build-multus.sh (make test and make e2e run it) or set %s", err, EnvMultus)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("multus: %s is not an executable file", p)
	}
	return p, nil
}
