package kubeapi_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestSecureMetrics: devplumbctl metrics as the shipped DaemonSet runs it (--secure-metrics,
// the devplumb service account with rbac.yaml) serves /metrics over TLS only to a token the
// API server authorizes for it (metrics-rbac.yaml's Prometheus service account): none is 401,
// another service account's is 403; /healthz needs none.
func TestSecureMetrics(t *testing.T) {
	applyRBAC(t)
	prom := serviceAccountToken(t, "monitoring", "prometheus-k8s")
	other := serviceAccountToken(t, "default", "default")
	c := manifests(t)
	for _, obj := range objects(t, filepath.Join(testenv.ModuleRoot(), "deployments", "metrics-rbac.yaml")) {
		e2etest.Must(t, c.Create(e2etest.Ctx(t), obj, metav1.CreateOptions{}))
		t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
	}
	addr := startSecureMetrics(t)

	if code, body := e2etest.Scrape(t, addr, "/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz without a token: %d %s, want 200", code, body)
	}
	if code, body := e2etest.Scrape(t, addr, "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d %s, want 401", code, body)
	}
	if code, body := e2etest.Scrape(t, addr, "/metrics", "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a token the API server rejects: %d %s, want 401", code, body)
	}
	if code, body := e2etest.Scrape(t, addr, "/metrics", other); code != http.StatusForbidden || !strings.Contains(body, "system:serviceaccount:default:default") {
		t.Errorf("/metrics as default/default: %d %s, want 403 naming the user", code, body)
	}
	// The authorizer sees the new binding through its informers: wait for the grant.
	waitFor(t, "Prometheus's token to scrape /metrics", func() error {
		code, body := e2etest.Scrape(t, addr, "/metrics", prom)
		if code != http.StatusOK || !strings.Contains(body, "devplumb_") {
			return fmt.Errorf("%d %.200s", code, body)
		}
		return nil
	})
}

// startSecureMetrics runs devplumbctl metrics --secure-metrics with the devplumb service
// account's credential and returns its address once it answers.
func startSecureMetrics(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	kc := filepath.Join(dir, "devplumb.kubeconfig")
	e2etest.Must(t, os.WriteFile(kc, []byte(kubeapi.Kubeconfig(srv.URL, srv.DevplumbToken)), 0o600))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	e2etest.Must(t, err)
	addr := l.Addr().String()
	e2etest.Must(t, l.Close())
	cmd := exec.Command(filepath.Join(testenv.Build(t, "./cmd/devplumbctl"), "devplumbctl"), "metrics", "--listen", addr,
		"--state-dir", filepath.Join(dir, "state"), "--secure-metrics", "--metrics-kubeconfig", kc)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	e2etest.Must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, "devplumbctl metrics to answer over TLS", func() error {
		if code, _ := e2etest.Scrape(t, addr, "/healthz", ""); code != http.StatusOK {
			return fmt.Errorf("/healthz: %d", code)
		}
		return nil
	})
	return addr
}

// serviceAccountToken makes namespace/name (and the namespace) and returns a token of it.
func serviceAccountToken(t *testing.T, namespace, name string) string {
	t.Helper()
	ctx := e2etest.Ctx(t)
	if namespace != "default" {
		_ = srv.CreateNamespace(ctx, namespace)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := srv.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	tr, err := srv.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	e2etest.Must(t, err)
	return tr.Status.Token
}
