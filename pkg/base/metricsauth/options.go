package metricsauth

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Options are a daemon's flags for its /metrics: plain HTTP for anyone (the default, for a
// host without an API server), or --secure-metrics as the shipped DaemonSets run it.
type Options struct {
	Secure     bool
	Kubeconfig string
	CertFile   string
	KeyFile    string
}

// Register adds the flags to fs.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.BoolVar(&o.Secure, "secure-metrics", false, "serve over TLS and let only callers the API server authorizes to get /metrics scrape it (TokenReview, SubjectAccessReview); probes stay open")
	fs.StringVar(&o.Kubeconfig, "metrics-kubeconfig", "", "with --secure-metrics: the kubeconfig that reviews scrapers' tokens (empty: the pod's in-cluster service account)")
	fs.StringVar(&o.CertFile, "tls-cert-file", "", "with --secure-metrics: the serving certificate (PEM; empty with --tls-private-key-file empty: self-signed)")
	fs.StringVar(&o.KeyFile, "tls-private-key-file", "", "with --secure-metrics: the serving certificate's private key (PEM)")
}

// Wrap returns metrics behind the guard and the TLS config to serve with, or metrics
// unchanged and nil when not Secure.
func (o Options) Wrap(metrics http.Handler) (http.Handler, *tls.Config, error) {
	if !o.Secure {
		if o.CertFile != "" || o.KeyFile != "" || o.Kubeconfig != "" {
			return nil, nil, fmt.Errorf("--tls-cert-file, --tls-private-key-file and --metrics-kubeconfig need --secure-metrics")
		}
		return metrics, nil, nil
	}
	tlsCfg, err := TLSConfig(o.CertFile, o.KeyFile, Host())
	if err != nil {
		return nil, nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("--secure-metrics needs the API server (--metrics-kubeconfig, or in a pod its service account): %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics API client: %w", err)
	}
	guarded, err := Guard(metrics, client)
	if err != nil {
		return nil, nil, err
	}
	return guarded, tlsCfg, nil
}
