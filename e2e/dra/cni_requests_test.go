package dra_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// requestCounter is a TLS reverse proxy in front of the API server that
// counts the requests passing through it, by verb and resource.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	url    string
}

func newRequestCounter(t *testing.T) *requestCounter {
	t.Helper()
	target, err := url.Parse(srv.URL)
	cniMust(t, err)
	rc := &requestCounter{counts: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // test server
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		rc.counts[r.Method+" "+resourceOf(r.URL.Path)]++
		rc.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	rc.url = s.URL
	return rc
}

// resourceOf is the resource (and subresource) a request path names.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		switch p {
		case "pods", "resourceclaims", "resourceslices", "network-attachment-definitions":
			if i+2 < len(parts) {
				return p + "/" + parts[i+2]
			}
			return p
		}
	}
	return path
}

// take returns the counts so far and starts again.
func (rc *requestCounter) take() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := rc.counts
	rc.counts = map[string]int{}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func describeCounts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// TestCNIAPIRequests counts the requests the devplumb binary makes to the
// API server per ADD and DEL of a DRA attachment: the local path reads
// nothing for the device (only writes the two statuses); the API path reads
// the pod, the claim and the slices of one driver on the node, once each.
// The counts are logged for `make bench` (go test -v -run TestCNIAPIRequests).
func TestCNIAPIRequests(t *testing.T) {
	rc := newRequestCounter(t)
	n := newCNINode(t)
	kc := filepath.Join(n.dir, "counted.kubeconfig")
	cniMust(t, os.WriteFile(kc, []byte(kubeapi.Kubeconfig(rc.url, srv.Token)), 0o600))
	dev := n.veth()
	n.slice(cniDev{"dev-0", attrs(dev, cniResource)})
	for _, tc := range []struct {
		name   string
		report bool
		reads  int // reads of the pod object, the claim and the slices
	}{{"local", true, 0}, {"api", false, 3}} {
		claimName := "claim-" + cniRandom()
		pod := n.pod("pod-"+cniRandom(), claimName, false)
		n.claim(claimName, nil, []*corev1.Pod{pod}, "dev-0")
		if tc.report {
			n.report(pod, claimName, []string{"dev-0"}, []string{dev})
		}
		conf := n.conf(map[string]any{"resourceName": cniResource, "kubeconfig": kc})
		netns := newCNINetNS(t)
		rc.take()
		if res := n.run("ADD", conf, netns, pod, "net1"); res.Code != 0 {
			t.Fatalf("%s ADD: %+v", tc.name, res)
		}
		add := rc.take()
		if res := n.run("DEL", conf, netns, pod, "net1"); res.Code != 0 {
			t.Fatalf("%s DEL: %+v", tc.name, res)
		}
		del := rc.take()
		reads := add["GET pods"] + add["GET resourceclaims"] + add["GET resourceslices"]
		// GET pods is also network-status's read of the pod's metadata.
		if reads-1 != tc.reads || add["PATCH resourceclaims/status"] != 1 || del["PATCH resourceclaims/status"] != 1 {
			t.Errorf("%s path: ADD %s; DEL %s: want %d device reads and one claim status apply each",
				tc.name, describeCounts(add), describeCounts(del), tc.reads)
		}
		t.Logf("API requests, %s path: ADD %d (%s), DEL %d (%s)", tc.name, total(add), describeCounts(add),
			total(del), describeCounts(del))
	}
}
