package kubeapi

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
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
	etcd         *proc
	apiserver    *proc
}

// proc is a child process and the channel closed when it has exited (and been reaped).
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// Start runs etcd and kube-apiserver under dir (created) and waits until the API server
// is ready. Close stops both.
func Start(dir string) (*Server, error) {
	apiBin, err := findAPIServer()
	if err != nil {
		return nil, err
	}
	etcdBin, err := findEtcd()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kubeapi: %w", err)
	}
	s := &Server{Dir: dir, apiserverBin: apiBin, Token: randomHex(16)}
	if err := s.startEtcd(etcdBin); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.writeAuth(); err != nil {
		s.Close()
		return nil, err
	}
	if s.port, err = freePort(); err != nil {
		s.Close()
		return nil, err
	}
	s.URL = "https://127.0.0.1:" + strconv.Itoa(s.port)
	if err := s.StartAPIServer(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.writeKubeconfig(); err != nil {
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
	s.etcd, err = s.spawn("etcd", bin,
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
	p, err := s.spawn("kube-apiserver", s.apiserverBin,
		"--etcd-servers="+s.etcdURL,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(s.port),
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(s.Dir, "certs"),
		"--token-auth-file="+filepath.Join(s.Dir, "tokens.csv"),
		// RBAC, so the shipped deployments/rbac.yaml is tested as it is; the admin token is
		// system:masters, which RBAC always allows.
		"--authorization-mode=RBAC",
		"--service-account-key-file="+filepath.Join(s.Dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(s.Dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--disable-admission-plugins=ServiceAccount")
	if err != nil {
		return err
	}
	s.apiserver = p
	if err := s.waitReady(); err != nil {
		return fmt.Errorf("%w\n%s", err, tail(filepath.Join(s.Dir, "kube-apiserver.log"), 40))
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

// spawn starts bin with its output in Dir/<name>.log. The child gets SIGKILL if the test
// process dies, so a crashed test leaves no server behind.
func (s *Server) spawn(name, bin string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(s.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = startOnSpawnerThread(cmd)
	logf.Close() // the child has its own descriptor
	if err != nil {
		return nil, fmt.Errorf("kubeapi: start %s (%s): %w", name, bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pdeathsig fires when the OS thread that started the child exits, not the process. Go
// ends threads whose goroutine exits while locked to them (network namespace code does
// that), so children are started from one goroutine that locks its thread for good.
var (
	spawnOnce sync.Once
	spawnReqs = make(chan func())
)

func startOnSpawnerThread(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range spawnReqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnReqs <- func() { errc <- cmd.Start() }
	return <-errc
}

// stop kills the process group and waits until the child is reaped, so its port is free.
func stop(p *proc) {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
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
		select {
		case <-s.apiserver.done:
			return fmt.Errorf("kubeapi: kube-apiserver exited: %v", s.apiserver.err)
		default:
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("kubeapi: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
