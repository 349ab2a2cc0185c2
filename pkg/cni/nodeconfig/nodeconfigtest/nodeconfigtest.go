// Package nodeconfigtest lets tests keep writing a node's paths beside a
// network config: Split moves them into a node config file of their own, as
// a node's administrator would write it, so each test node stays in its
// temporary directory and never reads the host's node config.
package nodeconfigtest

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// Split returns conf without the node config's keys, and the path of a node
// config file in a new temporary directory that holds them (an empty node
// config when conf has none: the defaults). conf is not changed.
func Split(t testing.TB, conf map[string]any) (map[string]any, string) {
	t.Helper()
	net, node := SplitMap(conf)
	return net, Write(t, node)
}

// SplitMap returns conf without the node config's keys, and those keys.
func SplitMap(conf map[string]any) (net, node map[string]any) {
	net, node = maps.Clone(conf), map[string]any{}
	for _, k := range nodeconfig.Keys {
		if v, ok := net[k]; ok {
			delete(net, k)
			if v != "" && v != nil && v != false {
				node[k] = v
			}
		}
	}
	return net, node
}

// SplitJSON is Split of a network config in JSON.
func SplitJSON(t testing.TB, conf []byte) ([]byte, string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatalf("nodeconfigtest: network config %s: %v", conf, err)
	}
	net, path := Split(t, m)
	data, err := json.Marshal(net)
	if err != nil {
		t.Fatal(err)
	}
	return data, path
}

// Write writes node (a node config's keys) to a node config file in a new
// temporary directory and returns its path.
func Write(t testing.TB, node map[string]any) string {
	t.Helper()
	path, err := WriteIn(t.TempDir(), node)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteIn writes node to dir/node.json, as the install container does.
func WriteIn(dir string, node map[string]any) (string, error) {
	data, err := json.Marshal(node)
	if err != nil {
		return "", fmt.Errorf("node config: %w", err)
	}
	if _, err := nodeconfig.Parse(data); err != nil {
		return "", fmt.Errorf("node config %s: %w", data, err)
	}
	path := filepath.Join(dir, "node.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", fmt.Errorf("node config: %w", err)
	}
	return path, nil
}

// Env is the environment entry that names path to devplumb.
func Env(path string) string { return nodeconfig.Env + "=" + path }

// SplitEnv is Split for a test that runs devplumb in its own process: it
// names the node config in the environment for the rest of the test
// (t.Setenv: not for parallel tests) and returns the network config in JSON.
// A node config equal to the one the environment names already is kept
// (concurrent calls of one test with the same node make no new file and
// do not touch the environment).
func SplitEnv(t testing.TB, conf map[string]any) []byte {
	t.Helper()
	net, node := SplitMap(conf)
	if !named(node) {
		t.Setenv(nodeconfig.Env, Write(t, node))
	}
	data, err := json.Marshal(net)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// named says whether the environment names a node config holding node.
func named(node map[string]any) bool {
	want, err := json.Marshal(node)
	path := os.Getenv(nodeconfig.Env)
	if err != nil || path == "" {
		return false
	}
	have, err := os.ReadFile(path)
	return err == nil && string(have) == string(want)
}
