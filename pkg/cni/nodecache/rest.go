package nodecache

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
)

// codecs are those of a scheme of core/v1 and resource.k8s.io/v1 only.
var codecs = sync.OnceValue(func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(resourcev1.AddToScheme(s))
	return serializer.NewCodecFactory(s)
})

// restClients are REST clients of core/v1 and resource.k8s.io/v1. They ask
// for protobuf, as the kubelet's own watches do: every change of a pod on the
// node (each network-status patch among them) reaches the watch, and
// protobuf costs the API server and the agent less to encode and decode.
func restClients(cfg *rest.Config) (core, res rest.Interface, err error) {
	restFor := func(gv *schema.GroupVersion, apiPath string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath = gv, apiPath
		c.ContentType = runtime.ContentTypeProtobuf
		c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		c.NegotiatedSerializer = codecs().WithoutConversion()
		return rest.RESTClientFor(c)
	}
	if core, err = restFor(&corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, nil, fmt.Errorf("nodecache: core/v1 client for %s: %w", cfg.Host, err)
	}
	if res, err = restFor(&resourcev1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, nil, fmt.Errorf("nodecache: resource.k8s.io/v1 client for %s: %w", cfg.Host, err)
	}
	return core, res, nil
}
