package plugin

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// A delegate's CNI spec code reaches the runtime; its own 100+ codes (and
// libcni's 999) would read as devplumb's and become 103, naming the code.
func TestDelegateErrorCodes(t *testing.T) {
	cases := []struct {
		err  error
		code uint
		msg  string
	}{
		{types.NewError(types.ErrInvalidNetworkConfig, "bad ipam", ""), types.ErrInvalidNetworkConfig, "ADD: bad ipam"},
		{types.NewError(101, "vendor reason", ""), ErrDelegate, "delegate error code 101: vendor reason"},
		{types.NewError(types.ErrInternal, "boom", ""), ErrDelegate, "delegate error code 999: boom"},
		{errors.New("exec: not found"), ErrDelegate, "ADD"},
	}
	for _, tc := range cases {
		got := delegateError("ADD", tc.err)
		if got.Code != tc.code || !strings.Contains(got.Msg, tc.msg) || !strings.Contains(got.Details, tc.err.Error()) {
			t.Errorf("%v: got %d %q %q, want %d %q", tc.err, got.Code, got.Msg, got.Details, tc.code, tc.msg)
		}
	}
}

// A claim status write refused for a missing permission fails ADD (code 106) with the
// permission in the message the runtime shows, not only in the details; best-effort
// keeps ADD going.
func TestClaimStatusPermissionError(t *testing.T) {
	perm := &kube.PermissionError{Verb: "associated-node:patch", Group: "resource.k8s.io", Resource: "resourceclaims/driver",
		Name: "d.example.com", Namespace: "ns", Err: errors.New("the API server's words")}
	w := &statusWriter{conf: &config.NetConf{Node: nodeconfig.Node{Kubeconfig: "/k/devplumb.kubeconfig"}}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	got := w.failed("writing the status of ResourceClaim ns/c", fmt.Errorf("kube: apply: %w", perm))
	for _, s := range []string{"writing the status of ResourceClaim ns/c failed", "/k/devplumb.kubeconfig",
		`verb "associated-node:patch" on resource "resourceclaims/driver"`, `name "d.example.com"`, `namespace "ns"`} {
		if got == nil || got.Code != ErrKube || !strings.Contains(got.Msg, s) {
			t.Fatalf("%q not in %+v", s, got)
		}
	}
	if !strings.Contains(got.Details, "the API server's words") {
		t.Errorf("details lose the server's answer: %q", got.Details)
	}
	w.conf.NetworkStatus = config.NetworkStatusBestEffort
	if got := w.failed("writing", perm); got != nil {
		t.Errorf("best-effort: %+v", got)
	}
}
