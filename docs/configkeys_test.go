package docs

import (
	"reflect"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
)

// jsonKeys are the JSON keys of a config type and of every struct it holds
// ("-" and untagged fields left out).
func jsonKeys(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() != "" && !strings.HasPrefix(t.PkgPath(), "github.com/devplumb/") {
		return nil
	}
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue // not in the file, nor what it holds
		}
		if name != "" {
			keys = append(keys, name)
		}
		keys = append(keys, jsonKeys(f.Type)...)
	}
	return keys
}

// Every key of netdev-dp's config, of devplumb's network config and of its
// node config has its row in the reference that documents it.
func TestConfigReferencesHaveEveryKey(t *testing.T) {
	for doc, types := range map[string][]reflect.Type{
		"docs/netdev-dp-config.md": {reflect.TypeFor[resources.Config]()},
		"docs/network-config.md":   {reflect.TypeFor[config.NetConf](), reflect.TypeFor[config.RuntimeConfig](), reflect.TypeFor[nodeconfig.Node]()},
	} {
		text := readDoc(t, doc)
		var keys []string
		for _, ty := range types {
			keys = append(keys, jsonKeys(ty)...)
		}
		if len(keys) < 10 {
			t.Fatalf("%s: found only the keys %v: the test reads the types wrong", doc, keys)
		}
		for _, k := range keys {
			if !strings.Contains(text, "`"+k+"`") && !strings.Contains(text, "."+k+"`") && !strings.Contains(text, "`"+k+".") {
				t.Errorf("%s has no row for the config key %q", doc, k)
			}
		}
	}
}
