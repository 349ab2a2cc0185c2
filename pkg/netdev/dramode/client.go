package dramode

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// NewClient is a client from a kubeconfig file, or from the pod's service
// account when kubeconfig is "" (the DaemonSet).
func NewClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		if kubeconfig == "" {
			return nil, fmt.Errorf("no --kubeconfig and no in-cluster config: %w", err)
		}
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = "netdev-dp"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}
