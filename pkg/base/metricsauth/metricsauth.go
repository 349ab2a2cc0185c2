// Package metricsauth guards a daemon's /metrics as Kubernetes components guard theirs: over
// TLS, for a bearer token the API server authenticates (TokenReview) whose user the API server
// authorizes (SubjectAccessReview) to get the path, e.g. a Prometheus service account bound to
// a ClusterRole with nonResourceURLs ["/metrics"]. Probes stay outside the guard.
package metricsauth

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
)

// The caches and bounds of a kube component's delegated authn/authz: a scraper's token is
// reviewed once a minute, not on every scrape, and a slow API server fails a scrape, not the
// daemon.
const (
	reviewTimeout = 10 * time.Second
	tokenCacheTTL = time.Minute
	allowCacheTTL = 5 * time.Minute
	denyCacheTTL  = 10 * time.Second
)

// retry is how a review is retried when the API server fails it (the value kube components use).
var retry = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// Guard returns h behind authentication and authorization by the API server client reaches.
func Guard(h http.Handler, client kubernetes.Interface) (http.Handler, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: reviewTimeout,
		WebhookRetryBackoff:      &retry,
		CacheTTL:                 tokenCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authentication by TokenReview: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       &retry,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authorization by SubjectAccessReview: %w", err)
	}
	return &guard{next: h, authn: authn, authz: authz}, nil
}

type guard struct {
	next  http.Handler
	authn authenticator.Request
	authz authorizer.Authorizer
}

// ServeHTTP answers 401 without a token the API server accepts, 403 when its user may not
// get the path (the non-resource URL, as `kubectl auth can-i get /metrics` asks).
func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	res, ok, err := g.authn.AuthenticateRequest(r)
	if err != nil || !ok {
		http.Error(w, "Unauthorized: give a bearer token the API server accepts", http.StatusUnauthorized)
		return
	}
	attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
	decision, reason, err := g.authz.Authorize(r.Context(), attrs)
	if err != nil {
		http.Error(w, "authorization failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if decision != authorizer.DecisionAllow {
		msg := fmt.Sprintf("Forbidden: user %q may not %s %s", res.User.GetName(), attrs.Verb, attrs.Path)
		if reason != "" {
			msg += ": " + reason
		}
		http.Error(w, msg, http.StatusForbidden)
		return
	}
	g.next.ServeHTTP(w, r)
}

// TLSConfig serves certFile and keyFile, read again on each handshake so a rotated pair
// (cert-manager, a mounted Secret) is served without a restart; with neither, a self-signed
// certificate for host made now (Prometheus then scrapes with insecure_skip_verify, as it
// does the kubelet's). One without the other is an error.
func TLSConfig(certFile, keyFile, host string) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "":
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("self-signed metrics certificate: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("self-signed metrics certificate: %w", err)
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
	case certFile == "" || keyFile == "":
		return nil, fmt.Errorf("a TLS certificate file (%q) needs its private key file (%q) and the other way round", certFile, keyFile)
	}
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		return nil, fmt.Errorf("metrics TLS certificate: %w", err)
	}
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("metrics TLS certificate: %w", err)
		}
		return &cert, nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: get}, nil
}

// Host is the name the self-signed certificate is for: the node's name when the DaemonSet
// gives it (NODE_NAME), else the host name.
func Host() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}
