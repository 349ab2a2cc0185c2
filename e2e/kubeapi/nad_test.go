package kubeapi_test

import (
	"errors"
	"testing"
	"time"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cni/kube"
)

func TestNADResourceName(t *testing.T) {
	if err := srv.InstallNADCRD(e2etest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	config := `{"cniVersion":"1.0.0","name":"sriov-a","type":"devplumb","delegate":{"type":"host-device"}}`
	annot := map[string]string{kube.ResourceNameAnnot: "example.com/sriov_a"}
	if _, err := srv.CreateNAD(e2etest.Ctx(t), "default", "sriov-a", config, annot); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.CreateNAD(e2etest.Ctx(t), "default", "plain", config, nil); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, 10*time.Second)

	got, err := c.NADResourceName(e2etest.Ctx(t), "default", "sriov-a")
	if err != nil || got != "example.com/sriov_a" {
		t.Fatalf("NADResourceName(sriov-a) = %q, %v; want example.com/sriov_a", got, err)
	}
	got, err = c.NADResourceName(e2etest.Ctx(t), "default", "plain")
	if err != nil || got != "" {
		t.Fatalf("NADResourceName(plain) = %q, %v; want empty", got, err)
	}
	_, err = c.NADResourceName(e2etest.Ctx(t), "default", "missing")
	if !errors.Is(err, kube.ErrNADNotFound) {
		t.Fatalf("NADResourceName(missing): got %v, want ErrNADNotFound", err)
	}
	_, err = c.NADResourceName(e2etest.Ctx(t), "other-ns", "sriov-a")
	if !errors.Is(err, kube.ErrNADNotFound) {
		t.Fatalf("NADResourceName(other-ns/sriov-a): got %v, want ErrNADNotFound", err)
	}
}
