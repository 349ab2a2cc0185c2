package kubeapi_test

import (
	"errors"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/kube"
)

func TestNADResourceName(t *testing.T) {
	if err := srv.InstallNADCRD(ctx(t)); err != nil {
		t.Fatal(err)
	}
	config := `{"cniVersion":"1.0.0","name":"sriov-a","type":"devplumb","delegate":{"type":"host-device"}}`
	annot := map[string]string{kube.ResourceNameAnnot: "example.com/sriov_a"}
	if _, err := srv.CreateNAD(ctx(t), "default", "sriov-a", config, annot); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.CreateNAD(ctx(t), "default", "plain", config, nil); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, 10*time.Second)

	got, err := c.NADResourceName(ctx(t), "default", "sriov-a")
	if err != nil || got != "example.com/sriov_a" {
		t.Fatalf("NADResourceName(sriov-a) = %q, %v; want example.com/sriov_a", got, err)
	}
	got, err = c.NADResourceName(ctx(t), "default", "plain")
	if err != nil || got != "" {
		t.Fatalf("NADResourceName(plain) = %q, %v; want empty", got, err)
	}
	_, err = c.NADResourceName(ctx(t), "default", "missing")
	if !errors.Is(err, kube.ErrNADNotFound) {
		t.Fatalf("NADResourceName(missing): got %v, want ErrNADNotFound", err)
	}
	_, err = c.NADResourceName(ctx(t), "other-ns", "sriov-a")
	if !errors.Is(err, kube.ErrNADNotFound) {
		t.Fatalf("NADResourceName(other-ns/sriov-a): got %v, want ErrNADNotFound", err)
	}
}
