package kubeletsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/pkg/base/resourcename"
	"github.com/devplumb/devplumb/pkg/base/unixsock"
	"github.com/devplumb/devplumb/pkg/kubeletsim/draplugin"
)

// The control API is HTTP with JSON bodies on the unix socket
// ROOT/nodesim/control.sock; only local processes that can reach the root
// directory can use it:
//
//	POST   /v1/pods                  body PodSpec      -> 200 PodAllocation
//	DELETE /v1/pods/{namespace}/{name}                 -> 204
//	GET    /v1/pods                                    -> 200 [PodAllocation]
//	GET    /v1/resources                               -> 200 {resource: [Device]}
//	GET    /v1/wait?resource=RES                       -> 204 once a plugin for RES is registered
//	                                                      and has advertised its devices
//	GET    /v1/wait?driver=DRIVER                      -> 204 once the DRA driver is registered
//	GET    /v1/drivers                                 -> 200 [draplugin.PluginInfo]
//
// Errors are {"error": "..."} with 400 (invalid pod), 404 (no such pod),
// 409 (pod exists), 422 (admission failed: no free device, plugin missing or
// failing) or 500.

// ControlSocket is the control socket of a node under root.
func ControlSocket(root string) string { return filepath.Join(StateDir(root), "control.sock") }

type controlServer struct {
	srv  *http.Server
	done chan struct{}
}

// listenControl makes the control socket. The node makes it before any socket
// that announces it (PodResources, plugin registration) and serves it once all
// are up: a client that sees the node announced finds the control socket, and
// its requests wait in the listen backlog until the node answers them (the
// socket appears only once it listens: unixsock).
func listenControl(root string) (net.Listener, error) {
	// A socket a killed nodesim left is replaced (checkNotServing refused a
	// live one).
	lis, err := unixsock.Listen(ControlSocket(root), 0o600)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return lis, nil
}

// serveControl answers the control API on lis until stop.
func serveControl(n *Node, lis net.Listener) *controlServer {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/pods", n.handleAdd)
	mux.HandleFunc("DELETE /v1/pods/{namespace}/{name}", n.handleDel)
	mux.HandleFunc("GET /v1/pods", func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, n.Pods()) })
	mux.HandleFunc("GET /v1/resources", func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, n.Resources()) })
	mux.HandleFunc("GET /v1/wait", n.handleWait)
	mux.HandleFunc("GET /v1/drivers", func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, n.DRADrivers()) })
	c := &controlServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		_ = c.srv.Serve(lis) // returns at stop
	}()
	return c
}

func (c *controlServer) stop() {
	c.srv.Close()
	<-c.done
}

func (n *Node) handleAdd(w http.ResponseWriter, r *http.Request) {
	var spec PodSpec
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		replyErr(w, fmt.Errorf("%w: pod spec JSON: %w", ErrInvalidPod, err))
		return
	}
	alloc, err := n.AddPod(r.Context(), spec)
	if err != nil {
		replyErr(w, err)
		return
	}
	reply(w, http.StatusOK, alloc)
}

func (n *Node) handleDel(w http.ResponseWriter, r *http.Request) {
	if err := n.DelPodContext(r.Context(), r.PathValue("namespace"), r.PathValue("name")); err != nil {
		replyErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleWait blocks until the resource's plugin is registered; the caller's
// request context (its timeout) bounds the wait.
func (n *Node) handleWait(w http.ResponseWriter, r *http.Request) {
	if driver := r.URL.Query().Get("driver"); driver != "" {
		if err := n.WaitDRADriver(r.Context(), driver); err != nil {
			replyErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	res := r.URL.Query().Get("resource")
	if err := resourcename.Validate(res); err != nil {
		replyErr(w, fmt.Errorf("%w: %w", ErrInvalidPod, err))
		return
	}
	if err := n.WaitRegistered(r.Context(), res); err != nil {
		replyErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func replyErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrInvalidPod):
		code = http.StatusBadRequest
	case errors.Is(err, ErrPodNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrPodExists):
		code = http.StatusConflict
	case errors.Is(err, ErrAdmission):
		code = http.StatusUnprocessableEntity
	}
	reply(w, code, map[string]string{"error": err.Error()})
}

// ControlClient talks to a running `nodesim serve` through its control socket.
type ControlClient struct {
	socket string
	http   *http.Client
}

// NewControlClient connects to the node serving root; it fails clearly when
// no nodesim serves there.
func NewControlClient(root string) (*ControlClient, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", root, err)
	}
	sock := ControlSocket(abs)
	if !isSocket(sock) {
		return nil, fmt.Errorf("no nodesim serving root %s: control socket %s missing (start `nodesim serve --root %s`)", abs, sock, root)
	}
	return newControlClient(sock, false), nil
}

// WaitControlClient is NewControlClient for a node that may still be starting
// (a script that started `nodesim serve` and goes on at once): it waits for
// the control socket until ctx ends, and the client's calls wait for a socket
// that refuses them (left by a killed nodesim) until their ctx ends.
func WaitControlClient(ctx context.Context, root string) (*ControlClient, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := NewControlClient(root)
		if err == nil {
			return newControlClient(c.socket, true), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w; waited for it until %w", err, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

func newControlClient(sock string, wait bool) *ControlClient {
	tr := &http.Transport{DialContext: dialControl(sock, wait)}
	return &ControlClient{socket: sock, http: &http.Client{Transport: tr}}
}

// dialControl dials the control socket; with wait, a socket that is gone or
// refuses (a killed nodesim's, until the starting one replaces it) is dialed
// again until ctx ends.
func dialControl(sock string, wait bool) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		for {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", sock)
			if err == nil || !wait || !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
				return conn, err
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// AddPod asks the node to admit a pod.
func (c *ControlClient) AddPod(ctx context.Context, spec PodSpec) (*PodAllocation, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode pod spec: %w", err)
	}
	var out PodAllocation
	if err := c.do(ctx, http.MethodPost, "/v1/pods", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DelPod asks the node to remove a pod; ErrPodNotFound when it has none such.
func (c *ControlClient) DelPod(ctx context.Context, namespace, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/pods/"+namespace+"/"+name, nil, nil)
}

// Pods lists the node's pods.
func (c *ControlClient) Pods(ctx context.Context) ([]PodAllocation, error) {
	var out []PodAllocation
	err := c.do(ctx, http.MethodGet, "/v1/pods", nil, &out)
	return out, err
}

// WaitRegistered waits until a plugin for res is registered on the node and
// has advertised its devices; ctx bounds the wait.
func (c *ControlClient) WaitRegistered(ctx context.Context, res string) error {
	return c.do(ctx, http.MethodGet, "/v1/wait?resource="+url.QueryEscape(res), nil, nil)
}

// WaitDRADriver waits until the DRA driver is registered on the node; ctx
// bounds the wait.
func (c *ControlClient) WaitDRADriver(ctx context.Context, driver string) error {
	return c.do(ctx, http.MethodGet, "/v1/wait?driver="+url.QueryEscape(driver), nil, nil)
}

// DRADrivers lists the registered DRA drivers.
func (c *ControlClient) DRADrivers(ctx context.Context) ([]draplugin.PluginInfo, error) {
	var out []draplugin.PluginInfo
	err := c.do(ctx, http.MethodGet, "/v1/drivers", nil, &out)
	return out, err
}

// Resources lists what plugins advertise.
func (c *ControlClient) Resources(ctx context.Context) (map[string][]Device, error) {
	var out map[string][]Device
	err := c.do(ctx, http.MethodGet, "/v1/resources", nil, &out)
	return out, err
}

func (c *ControlClient) do(ctx context.Context, method, path string, body []byte, out any) error {
	if strings.Contains(path, "..") {
		return fmt.Errorf("%w: bad namespace or name in %q", ErrInvalidPod, path)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://nodesim"+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("nodesim control socket %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return statusError(resp.StatusCode, e.Error)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode nodesim answer: %w", err)
	}
	return nil
}

// statusError restores the sentinel errors across the socket.
func statusError(code int, msg string) error {
	var sentinel error
	switch code {
	case http.StatusBadRequest:
		sentinel = ErrInvalidPod
	case http.StatusNotFound:
		sentinel = ErrPodNotFound
	case http.StatusConflict:
		sentinel = ErrPodExists
	case http.StatusUnprocessableEntity:
		sentinel = ErrAdmission
	default:
		return fmt.Errorf("%s (HTTP %d)", msg, code)
	}
	return &remoteError{msg: msg, sentinel: sentinel}
}

type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }
