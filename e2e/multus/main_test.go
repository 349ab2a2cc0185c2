// Package multus runs real Multus thin (built by scripts/build-multus.sh) against a real
// kube-apiserver, with devplumb as the delegate of a NetworkAttachmentDefinition.
package multus_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// EnvMultus names the Multus thin binary; scripts/build-multus.sh prints it.
const EnvMultus = "DEVPLUMB_MULTUS"

// MultusVersion is what scripts/build-multus.sh builds by default.
const MultusVersion = "v4.3.0"

var srv *kubeapi.Server

func TestMain(m *testing.M) {
	if _, err := multusBin(); err != nil { // before spending a server start
		os.Stderr.WriteString("FAIL: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(kubeapi.Main(m, "devplumb-multus-", func(s *kubeapi.Server) error {
		srv = s
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		return s.InstallNADCRD(ctx)
	}))
}

// multusBin is $DEVPLUMB_MULTUS, else the binary scripts/build-multus.sh left in its cache.
func multusBin() (string, error) {
	return kubeapi.FindBinary(EnvMultus, "multus-"+MultusVersion,
		"build it with scripts/build-multus.sh (make test and make e2e run it)")
}
