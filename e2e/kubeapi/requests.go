package kubeapi

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// RequestCounter is a TLS reverse proxy in front of the API server that counts the
// requests passing through it by verb and resource ("GET pods", "PATCH
// resourceclaims/status"), and the connections opened to it: what one CNI call costs
// the API server. A read of object metadata only (client-go's metadata client) counts
// apart, as "GET pods (metadata)", so the pod read by DRA and by network-status differ.
type RequestCounter struct {
	URL string // https://127.0.0.1:PORT; kubeconfigs point here (Kubeconfig(URL, token))

	srv    *httptest.Server
	mu     sync.Mutex
	counts map[string]int
}

// Connections is the key under which Take reports the connections opened.
const Connections = "connections"

// NewRequestCounter starts the proxy in front of the API server at target.
func NewRequestCounter(target string) (*RequestCounter, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: request counter target %q: %w", target, err)
	}
	rc := &RequestCounter{counts: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // local test server
	rc.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.add(r.Method + " " + ResourceOf(r.URL.Path) + metadataOnly(r) + agentWatch(r))
		proxy.ServeHTTP(w, r)
	}))
	rc.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rc.add(Connections)
		}
	}
	rc.srv.StartTLS()
	rc.URL = rc.srv.URL
	return rc, nil
}

func (rc *RequestCounter) add(key string) {
	rc.mu.Lock()
	rc.counts[key]++
	rc.mu.Unlock()
}

// AgentWatch marks the requests of the node agent's watches (pkg/cni/nodecache,
// user agent devplumb-agent): its lists, watches and reads of a pod's claims
// when the pod reaches the node, made per pod, not per CNI call.
const AgentWatch = " (agent watch)"

func agentWatch(r *http.Request) string {
	if strings.HasPrefix(r.UserAgent(), "devplumb-agent") {
		return AgentWatch
	}
	return ""
}

// metadataOnly marks a request that asks for object metadata only.
func metadataOnly(r *http.Request) string {
	if strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata") {
		return " (metadata)"
	}
	return ""
}

// ResourceOf is the resource (and subresource) a request path names.
func ResourceOf(path string) string {
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

// Take returns the counts so far and starts again.
func (rc *RequestCounter) Take() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := rc.counts
	rc.counts = map[string]int{}
	return out
}

// Close stops the proxy.
func (rc *RequestCounter) Close() { rc.srv.Close() }

// Requests is the number of requests in counts (connections not included).
func Requests(counts map[string]int) int {
	n := 0
	for k, v := range counts {
		if k != Connections {
			n += v
		}
	}
	return n
}

// DescribeCounts is counts as "GET pods=1 PATCH pods=1", sorted.
func DescribeCounts(counts map[string]int) string {
	parts := make([]string, 0, len(counts))
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
