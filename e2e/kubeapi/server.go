package kubeapi

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// readyBound is how long etcd + kube-apiserver may take to become ready on a loaded
// 2-core machine. It bounds a wait, it is not a speed assertion.
const readyBound = 3 * time.Minute

// Server is a running etcd + kube-apiserver pair.
type Server struct {
	Dir   string // everything lives here: etcd data, certs, logs, kubeconfig
	URL   string // https://127.0.0.1:PORT
	Token string // bearer token of a system:masters user
	// DevplumbToken authenticates as DevplumbUser, who may do only what RBAC grants.
	DevplumbToken string
	Kubeconfig    string // path of a kubeconfig for URL and Token
	Config        *rest.Config
	Client        kubernetes.Interface

	apiserverBin string
	port         int
	etcdURL      string
	opts         Options
	etcd         *proc
	apiserver    *proc
}

// startAttempts: a start is tried again, on other ports, when etcd or kube-apiserver
// exits while starting (a port taken by someone else between pick and bind).
const startAttempts = 3

// Options change how the API server runs; the zero value is what Start uses.
type Options struct {
	// Address and Port to serve on; default 127.0.0.1 and a free port. A real node's pods
	// reach the API server at the first address of ServiceCIDR, port 443.
	Address string
	Port    int
	// ServiceCIDR is --service-cluster-ip-range; default 10.96.0.0/16.
	ServiceCIDR string
	// ServiceAccounts says a kube-controller-manager runs beside the server (a real
	// node) and makes each namespace's "default" ServiceAccount. Without one the harness
	// makes them itself in "default", "kube-system" and every namespace CreateNamespace
	// makes: the ServiceAccount admission plugin, on as in production, refuses a pod
	// whose service account does not exist.
	ServiceAccounts bool
	// AllowPrivileged is --allow-privileged, as clusters made by kubeadm have it: a node's
	// privileged DaemonSets (Multus thick's) are refused without it.
	AllowPrivileged bool
}

// Start runs etcd and kube-apiserver under dir (created) and waits until the API server
// is ready. Close stops both. A missing binary is an error that says how to get it.
func Start(dir string) (*Server, error) {
	return StartWith(dir, Options{})
}

// StartWith is Start with options.
func StartWith(dir string, o Options) (*Server, error) {
	if o.Address == "" {
		o.Address = "127.0.0.1"
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = "10.96.0.0/16"
	}
	apiBin, err := findAPIServer()
	if err != nil {
		return nil, err
	}
	etcdBin, err := findEtcd()
	if err != nil {
		return nil, err
	}
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		s, err := start(filepath.Join(dir, fmt.Sprintf("try%d", attempt)), apiBin, etcdBin, o)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errExited) {
			break // not a lost port race: trying again would only take as long again
		}
	}
	return nil, errors.Join(errs...)
}

// errExited marks a server process that ended while it was being started.
var errExited = errors.New("exited while starting")

func start(dir, apiBin, etcdBin string, o Options) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kubeapi: %w", err)
	}
	s := &Server{Dir: dir, apiserverBin: apiBin, Token: randomHex(16), opts: o}
	err := s.startEtcd(etcdBin)
	if err == nil {
		err = s.writeAuth()
	}
	if err == nil {
		s.port = o.Port
		if s.port == 0 {
			s.port, err = freePort()
		}
	}
	if err == nil {
		s.URL = "https://" + net.JoinHostPort(o.Address, strconv.Itoa(s.port))
		err = s.StartAPIServer()
	}
	if err == nil {
		err = s.writeKubeconfig()
	}
	// The API server makes these namespaces itself, but maybe not yet: made here, their
	// service accounts can be made at once.
	for _, ns := range []string{"default", "kube-system"} {
		if err == nil {
			err = s.CreateNamespace(context.Background(), ns)
		}
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) startEtcd(bin string) error {
	client, err := freePort()
	if err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	s.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	s.etcd, err = spawn(s.Dir, "etcd", bin,
		"--name", "devplumb-e2e", "--data-dir", filepath.Join(s.Dir, "etcd"),
		"--listen-client-urls", s.etcdURL, "--advertise-client-urls", s.etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "devplumb-e2e="+peerURL)
	return err
}

// StartAPIServer starts kube-apiserver (again, after StopAPIServer) on the same port and
// etcd, and waits until it is ready.
func (s *Server) StartAPIServer() error {
	if s.apiserver != nil {
		return fmt.Errorf("kubeapi: kube-apiserver already running (pid %d)", s.apiserver.cmd.Process.Pid)
	}
	p, err := spawn(s.Dir, "kube-apiserver", s.apiserverBin,
		"--etcd-servers="+s.etcdURL,
		"--bind-address="+s.opts.Address, "--secure-port="+strconv.Itoa(s.port),
		"--advertise-address="+s.opts.Address, "--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(s.Dir, "certs"),
		"--token-auth-file="+filepath.Join(s.Dir, "tokens.csv"),
		// What a production cluster runs (kubeadm's flags): RBAC, so the shipped
		// deployments/rbac.yaml is tested as it is (the admin token is system:masters, which
		// RBAC always allows), behind the Node authorizer; NodeRestriction and ServiceAccount
		// (pods get their projected token; a token bound to a pod carries its node) on top
		// of the default admission plugins, ValidatingAdmissionPolicy among them.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction,ServiceAccount",
		"--service-account-key-file="+filepath.Join(s.Dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(s.Dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range="+s.opts.ServiceCIDR, "--allow-privileged="+strconv.FormatBool(s.opts.AllowPrivileged))
	if err != nil {
		return err
	}
	s.apiserver = p
	if err := s.waitReady(); err != nil {
		return fmt.Errorf("%w\nkube-apiserver.log:\n%s\netcd.log:\n%s", err,
			tail(filepath.Join(s.Dir, "kube-apiserver.log"), 30), tail(filepath.Join(s.Dir, "etcd.log"), 10))
	}
	return nil
}

// StopAPIServer kills kube-apiserver and waits for it to exit; etcd keeps running.
func (s *Server) StopAPIServer() {
	stop(s.apiserver)
	s.apiserver = nil
}

// Close stops kube-apiserver and etcd and removes nothing: Dir belongs to the caller.
func (s *Server) Close() {
	s.StopAPIServer()
	stop(s.etcd)
	s.etcd = nil
}

// waitReady polls /readyz until it answers 200 or readyBound passes.
func (s *Server) waitReady() error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test server, self-signed
	}}
	ctx, cancel := context.WithTimeout(context.Background(), readyBound)
	defer cancel()
	var last string
	for ctx.Err() == nil {
		// A dead process is reported at once, not after readyBound.
		for name, p := range map[string]*proc{"kube-apiserver": s.apiserver, "etcd": s.etcd} {
			if p.exited() {
				return fmt.Errorf("kubeapi: %s %w: %v", name, errExited, p.err)
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("kubeapi: kube-apiserver at %s not ready within %s: %s", s.URL, readyBound, last)
}

func (s *Server) writeKubeconfig() error {
	s.Kubeconfig = filepath.Join(s.Dir, "kubeconfig")
	if err := os.WriteFile(s.Kubeconfig, []byte(Kubeconfig(s.URL, s.Token)), 0o600); err != nil {
		return fmt.Errorf("kubeapi: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeapi: %w", err)
	}
	// Tests make hundreds of requests (storms, access reviews): client-go's default
	// 5 QPS would make them slow, not more real.
	cfg.QPS, cfg.Burst = 200, 400
	s.Config = cfg
	s.Client, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubeapi: %w", err)
	}
	return nil
}

// Kubeconfig is a kubeconfig for server with a bearer token. TLS is not verified: the
// test server's certificate is self-signed and made up at start.
func Kubeconfig(server, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: e2e
  user: {token: %q}
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e}
current-context: e2e
`, server, token)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	n := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if n++; n > lines {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// PIDs are the running etcd's and kube-apiserver's process IDs: what a benchmark reads
// their CPU time by.
func (s *Server) PIDs() []int {
	var pids []int
	for _, p := range []*proc{s.etcd, s.apiserver} {
		if p != nil && !p.exited() {
			pids = append(pids, p.cmd.Process.Pid)
		}
	}
	return pids
}
