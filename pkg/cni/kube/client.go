// Package kube is devplumb's small Kubernetes client: it writes devplumb's own entry of a
// pod's network-status annotation and reads a NetworkAttachmentDefinition's resourceName;
// it also records an Event on a pod (events.go) and does DRA's reads and writes (dra.go).
// Every call is bounded by the timeout given to New, retries included.
//
// The first two touch only object metadata, so it uses client-go's metadata client
// (PartialObjectMetadata) rather than the typed clientsets: those register the scheme of
// every API group at start-up, and devplumb starts once per CNI call.
package kube

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ResourceNameAnnot is the NetworkAttachmentDefinition annotation naming the device
// plugin resource that backs the network.
const ResourceNameAnnot = "k8s.v1.cni.cncf.io/resourceName"

var (
	// ErrUnreachable: the API server did not answer within the bound.
	ErrUnreachable = errors.New("kubernetes API server unreachable")
	// ErrPodNotFound: the pod does not exist.
	ErrPodNotFound = errors.New("pod not found")
	// ErrPodUIDMismatch: a pod of that name exists but is not the one CNI was called for.
	ErrPodUIDMismatch = errors.New("pod UID mismatch (the pod was deleted and recreated)")
	// ErrNADNotFound: the NetworkAttachmentDefinition does not exist.
	ErrNADNotFound = errors.New("NetworkAttachmentDefinition not found")
	// ErrBadAnnotation: the pod's network-status annotation is not a JSON list of entries.
	ErrBadAnnotation = errors.New("invalid network-status annotation")
)

// The resources devplumb reads and patches.
var (
	podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nadsResource = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}
)

// Client talks to one API server with the identity of one kubeconfig.
type Client struct {
	log     *slog.Logger
	meta    metadata.Interface
	host    string
	timeout time.Duration
	cfg     *rest.Config // for the DRA clients, made on first use (dra.go)
	draMu   sync.Mutex
	dra     *draClients
	podsMu  sync.Mutex
	// pods are the pods Pod read, by namespace/name, until a network-status edit
	// of the pod starts from one instead of reading the pod's metadata again.
	pods map[string]*metav1.PartialObjectMetadata
	// cache, when set, answers reads first (UseCache).
	cache Cache
}

// New loads kubeconfig (a file path, required) and returns a client whose calls each
// finish within timeout (required: its caller, devplumb, bounds the kubelet and the API
// server alike, so the bound is the caller's, not a second default here).
// It logs through log (slog.Default() when nil), so one CNI call logs in one format.
func New(kubeconfig string, timeout time.Duration, log *slog.Logger) (*Client, error) {
	if kubeconfig == "" {
		return nil, errors.New("kube: kubeconfig path is empty")
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("kube: timeout %v: must be positive", timeout)
	}
	cfg, err := LoadConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return newFromConfig(cfg, timeout, log)
}

// LoadConfig loads a kubeconfig file, as New does: only one whose users
// run no command and whose credential files are beside it (checkCredentials).
func LoadConfig(kubeconfig string) (*rest.Config, error) {
	kubeconfig = filepath.Clean(kubeconfig)
	api, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kube: load kubeconfig %s: %w", kubeconfig, err)
	}
	// Relative file names are the kubeconfig's directory's, as kubectl reads them.
	if err := clientcmd.ResolveLocalPaths(api); err != nil {
		return nil, fmt.Errorf("kube: kubeconfig %s: %w", kubeconfig, err)
	}
	if err := checkCredentials(kubeconfig, api); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*api, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kube: kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// QPS and Burst are the client's limits: a CNI call makes a handful of requests, and
// retries on conflict must not be throttled by client-go's default 5 QPS limiter.
const (
	QPS   = 100
	Burst = 200
)

func newFromConfig(cfg *rest.Config, timeout time.Duration, log *slog.Logger) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "devplumb"
	// One request must not use up the whole bound, so that a retry still fits.
	cfg.Timeout = timeout / 2
	cfg.QPS, cfg.Burst = QPS, Burst
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: client for %s: %w", cfg.Host, err)
	}
	return &Client{log: log, meta: mc, host: cfg.Host, timeout: timeout, cfg: cfg}, nil
}
