package bench

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// trafficProxy is a TLS reverse proxy in front of the API server that counts, per kind of
// request ("WATCH pods spec.nodeName=bench-node"), the requests, the bytes of their
// responses and the events of watches: what a client's informers carry.
type trafficProxy struct {
	URL   string
	srv   *httptest.Server
	mu    sync.Mutex
	stats map[string]*traffic
}

// traffic is what one kind of request carried.
type traffic struct {
	Requests, Bytes, Events int
}

func newTrafficProxy(target string) (*trafficProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("traffic proxy target %q: %w", target, err)
	}
	p := &trafficProxy{stats: map[string]*traffic{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the bench's own API server
	rp.FlushInterval = -1                                                                  // watch events as they come
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := requestKind(r)
		p.add(key, traffic{Requests: 1})
		rp.ServeHTTP(&countingWriter{ResponseWriter: w, p: p, key: key}, r)
	}))
	p.srv.StartTLS()
	p.URL = p.srv.URL
	return p, nil
}

func (p *trafficProxy) add(key string, t traffic) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats[key]
	if s == nil {
		s = &traffic{}
		p.stats[key] = s
	}
	s.Requests, s.Bytes, s.Events = s.Requests+t.Requests, s.Bytes+t.Bytes, s.Events+t.Events
}

// take returns the counts so far and starts again.
func (p *trafficProxy) take() map[string]traffic {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]traffic, len(p.stats))
	for k, v := range p.stats {
		out[k] = *v
	}
	p.stats = map[string]*traffic{}
	return out
}

// close ends the proxy, and the watches still open through it.
func (p *trafficProxy) close() {
	p.srv.CloseClientConnections()
	p.srv.Close()
}

// requestKind is "VERB resource[ selector]": WATCH, LIST or GET for reads (a watch=true
// query, a collection, one object), the method otherwise; a field or label selector, the
// scope of an informer, is part of it.
func requestKind(r *http.Request) string {
	res, named := resourceOfPath(r.URL.Path)
	q := r.URL.Query()
	verb := r.Method
	if verb == http.MethodGet {
		switch {
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			verb = "WATCH"
		case !named:
			verb = "LIST"
		}
	}
	var sel []string
	for _, k := range []string{"fieldSelector", "labelSelector"} {
		if v := q.Get(k); v != "" {
			sel = append(sel, v)
		}
	}
	return strings.TrimSpace(verb + " " + res + " " + strings.Join(sel, ","))
}

// resourceOfPath is the resource (with its subresource) an API path names, and whether it
// names one object: /api/v1/namespaces/NS/pods/NAME/status is "pods/status", named. A
// path that is not a resource's (discovery) is returned as it is.
func resourceOfPath(path string) (string, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return path, false
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	res := rest[0]
	if len(rest) > 2 {
		res += "/" + rest[2]
	}
	return res, len(rest) > 1
}

// countingWriter counts a response's bytes and, for a watch, its events.
type countingWriter struct {
	http.ResponseWriter
	p      *trafficProxy
	key    string
	events *eventCounter
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.events == nil {
		w.events = &eventCounter{protobuf: strings.Contains(w.Header().Get("Content-Type"), "protobuf")}
	}
	// Counted before it is written: once the client has it, take sees it.
	t := traffic{Bytes: len(b)}
	if strings.HasPrefix(w.key, "WATCH ") {
		t.Events = w.events.feed(b)
	}
	w.p.add(w.key, t)
	return w.ResponseWriter.Write(b)
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// eventCounter counts the events of a watch stream fed to it piece by piece: newline
// delimited objects for JSON, 4-byte big-endian length prefixed frames for protobuf.
type eventCounter struct {
	protobuf bool
	header   []byte // protobuf: the length prefix read so far
	left     int    // protobuf: bytes of the current frame still to come
}

// feed reads b and returns the events completed in it.
func (c *eventCounter) feed(b []byte) int {
	if !c.protobuf {
		return strings.Count(string(b), "\n")
	}
	events := 0
	for len(b) > 0 {
		if c.left > 0 {
			n := min(c.left, len(b))
			c.left, b = c.left-n, b[n:]
			if c.left == 0 {
				events++
			}
			continue
		}
		n := min(4-len(c.header), len(b))
		c.header, b = append(c.header, b[:n]...), b[n:]
		if len(c.header) == 4 {
			c.left, c.header = int(binary.BigEndian.Uint32(c.header)), nil
			if c.left == 0 {
				events++
			}
		}
	}
	return events
}

// trafficRows is traffic as table rows, sorted by kind: kind, requests, events, KiB.
func trafficRows(t map[string]traffic) [][]string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rows := make([][]string, 0, len(keys))
	for _, k := range keys {
		v := t[k]
		events := "–"
		if strings.HasPrefix(k, "WATCH ") {
			events = fmt.Sprint(v.Events)
		}
		rows = append(rows, []string{k, fmt.Sprint(v.Requests), events, fmt.Sprintf("%.1f KiB", float64(v.Bytes)/1024)})
	}
	return rows
}
