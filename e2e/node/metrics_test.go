package node_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
)

// The metrics ports of the shipped DaemonSets (host network).
const (
	devplumbMetrics = "127.0.0.1:9111" // devplumb-daemonset.yaml's metrics container
	netdevDPMetrics = "127.0.0.1:9110" // netdev-dp-daemonset.yaml
	draMetrics      = "127.0.0.1:9112" // dra/netdev-dp-dra.yaml
)

// TestMetricsOnlyForTheCluster: the DaemonSets as shipped serve /metrics over TLS to the
// Prometheus service account metrics-rbac.yaml binds, refuse a request without a token
// (401) and a service account without the grant (403), and leave /healthz open, as their
// kubelet's HTTPS probes need.
func TestMetricsOnlyForTheCluster(t *testing.T) {
	deployed(t)
	s := newScrapers(t)
	s.check(t, devplumbMetrics, "devplumb_")
	s.check(t, netdevDPMetrics, "netdev_dp_")
}

// scrapers are the bearer tokens of a service account metrics-rbac.yaml lets scrape
// (monitoring/prometheus-k8s) and of one it does not.
type scrapers struct{ prom, other string }

func newScrapers(t *testing.T) scrapers {
	t.Helper()
	return scrapers{prom: saToken(t, "monitoring", "prometheus-k8s"), other: saToken(t, "monitoring", "not-prometheus")}
}

func (s scrapers) check(t *testing.T, addr, family string) {
	t.Helper()
	if code, body := e2etest.Scrape(t, addr, "/healthz", ""); code != http.StatusOK {
		t.Errorf("%s/healthz without a token: %d %s, want 200", addr, code, body)
	}
	if code, body := e2etest.Scrape(t, addr, "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("%s/metrics without a token: %d %.200s, want 401", addr, code, body)
	}
	if code, body := e2etest.Scrape(t, addr, "/metrics", s.other); code != http.StatusForbidden {
		t.Errorf("%s/metrics as monitoring/not-prometheus: %d %.200s, want 403", addr, code, body)
	}
	waitFor(t, "Prometheus's token to scrape "+addr, func(context.Context) error {
		if code, body := e2etest.Scrape(t, addr, "/metrics", s.prom); code != http.StatusOK || !strings.Contains(body, family) {
			return fmt.Errorf("%d %.200s", code, body)
		}
		return nil
	})
}

// saToken creates the service account (and its namespace) if needed and returns a token.
func saToken(t *testing.T, namespace, name string) string {
	t.Helper()
	c := ctx(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := nd.Client.CoreV1().Namespaces().Create(c, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := nd.Client.CoreV1().ServiceAccounts(namespace).Create(c, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := nd.Client.CoreV1().ServiceAccounts(namespace).CreateToken(c, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	e2etest.Must(t, err)
	return tr.Status.Token
}
