package plugin

import (
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/base/libcnicache"
)

// FuzzCNIArgs: no CNI_ARGS string panics; what podFromArgs accepts is the
// value its key carried (never a piece of another key), and the pairs
// passed on to delegates carry no separator in a key.
func FuzzCNIArgs(f *testing.F) {
	f.Add("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=u;K8S_POD_INFRA_CONTAINER_ID=c")
	f.Add("K8S_POD_NAMESPACE=a=b;K8S_POD_NAME=;;=x;IgnoreUnknown=true")
	f.Add("IgnoreUnknown=1;K8S_POD_NAME=\x00;K8S_POD_NAMESPACE=../..")
	f.Add(";;;")
	f.Add("FOO")
	f.Fuzz(func(t *testing.T, s string) {
		pod, err := podFromArgs(s)
		if err == nil {
			for _, v := range []string{pod.Namespace, pod.Name, pod.UID} {
				if strings.Contains(v, ";") {
					t.Fatalf("value %q of %q spans a separator", v, s)
				}
			}
		}
		for _, kv := range libcnicache.SplitArgs(s) {
			if strings.ContainsAny(kv[0], ";=") || strings.Contains(kv[1], ";") {
				t.Fatalf("pair %q of %q", kv, s)
			}
		}
	})
}
