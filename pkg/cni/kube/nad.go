package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NADResourceName returns the k8s.v1.cni.cncf.io/resourceName annotation of the
// NetworkAttachmentDefinition namespace/name, "" when the NAD has none. A missing NAD is
// ErrNADNotFound; an API server that does not answer within the bound is ErrUnreachable.
func (c *Client) NADResourceName(ctx context.Context, namespace, name string) (string, error) {
	if namespace == "" || name == "" {
		return "", fmt.Errorf("kube: NetworkAttachmentDefinition %q/%q: namespace and name are required", namespace, name)
	}
	if c.cache != nil {
		if nad, ok := c.cache.NAD(namespace, name); ok {
			return nad.Annotations[ResourceNameAnnot], nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var res string
	err := c.retry(ctx, func(ctx context.Context) (bool, error) {
		nad, err := c.meta.Resource(nadsResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, fmt.Errorf("%w: %s/%s", ErrNADNotFound, namespace, name)
		}
		if err != nil {
			return false, err
		}
		res = nad.Annotations[ResourceNameAnnot]
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("kube: get NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
	}
	return res, nil
}
