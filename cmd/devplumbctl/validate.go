package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"sigs.k8s.io/yaml"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

var validators = map[string]func(path string, data []byte) error{
	"devinfo": func(_ string, data []byte) error { _, err := devinfo.Parse(data); return err },
	"netconf": validateNetconf,
	"node":    func(_ string, data []byte) error { _, err := nodeconfig.Parse(data); return err },
	"cdi":     validateCDI,
}

const validateUsage = `usage: devplumbctl validate devinfo|netconf|node|cdi FILE...
  devinfo  an NPWG device-info file (spec 1.1.0)
  netconf  a devplumb network config, a conflist with devplumb entries, or a
           NetworkAttachmentDefinition (JSON or YAML) whose config is either,
           checked with this node's node config ($DEVPLUMB_NODE_CONFIG or
           /etc/cni/net.d/devplumb.d/node.json; none: the defaults)
  node     a devplumb node config (docs/security.md, "Trust model")
  cdi      a CDI spec file, read and checked by the CDI library
exit 0 when all are valid, else one "FILE: reason" line each and exit 1
`

// maxInput bounds a file to validate: a FIFO or /dev/zero given by mistake
// is refused instead of blocking or filling memory.
const maxInput = 16 << 20

func validate(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, validateUsage)
		return 0
	}
	if len(args) < 2 || validators[args[0]] == nil {
		fmt.Fprint(stderr, validateUsage)
		return 2
	}
	check := validators[args[0]]
	failed := false
	for _, path := range args[1:] {
		data, err := safefile.ReadFile(path, maxInput, safefile.Follow)
		if err == nil {
			err = check(path, data)
		}
		if err != nil {
			failed = true
			// One line per file, so scripts can count and grep.
			fmt.Fprintf(stdout, "%s: %s\n", path, strings.ReplaceAll(err.Error(), "\n", "; "))
		}
	}
	if failed {
		return 1
	}
	return 0
}

// validateNetconf accepts a devplumb network config or a conflist holding
// devplumb entries (what runtimes read from net.d), or a
// NetworkAttachmentDefinition (JSON or YAML) whose spec.config is either. For
// a NAD it does what Multus does first: a config without "name" gets the
// NAD's name, and the resourceName annotation must be a valid resource name.
func validateNetconf(_ string, data []byte) error {
	nad, ok := asNAD(data)
	if !ok {
		return validateConf(data)
	}
	if nad.Spec.Config == "" {
		return errors.New("NetworkAttachmentDefinition has no spec.config")
	}
	if res, ok := nad.Metadata.Annotations[resourceNameAnnot]; ok {
		if err := config.CheckResourceName("annotation "+resourceNameAnnot, res); err != nil {
			return err
		}
	}
	conf, err := withName([]byte(nad.Spec.Config), nad.Metadata.Name)
	if err != nil {
		return fmt.Errorf("spec.config: %w", err)
	}
	if err := validateConf(conf); err != nil {
		return fmt.Errorf("spec.config: %w", err)
	}
	return nil
}

// validateConf checks one config, or each devplumb entry of a conflist as
// libcni would hand it to devplumb (with the list's name and cniVersion).
func validateConf(data []byte) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil || top["plugins"] == nil {
		if err := devplumbType(top); err != nil {
			return err
		}
		return parseConf(data)
	}
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		return fmt.Errorf("conflist: %w", err)
	}
	found := false
	for i, p := range list.Plugins {
		if p.Network.Type != "devplumb" {
			continue
		}
		found = true
		conf, err := inject(p.Bytes, list.Name, list.CNIVersion)
		if err == nil {
			err = parseConf(conf)
		}
		if err != nil {
			return fmt.Errorf("conflist %q: plugins[%d]: %w", list.Name, i, err)
		}
	}
	if !found {
		return fmt.Errorf("conflist %q: no plugin of type devplumb", list.Name)
	}
	return nil
}

// devplumbType refuses a single config of another plugin (a plain bridge
// config): what is wrong with it is not a missing "delegate" but that it is
// not devplumb's. A config whose type is missing or not a string is left to
// config.Parse, which says what it expects.
func devplumbType(top map[string]json.RawMessage) error {
	var typ string
	if json.Unmarshal(top["type"], &typ) != nil || typ == "" || typ == "devplumb" {
		return nil
	}
	return fmt.Errorf("not a devplumb config: its type is %q, not \"devplumb\" (validate netconf checks devplumb configs, "+
		"conflists holding devplumb entries, and NetworkAttachmentDefinitions whose config is either)", typ)
}

// inject sets name and cniVersion as libcni does before it runs a plugin of
// a list.
func inject(conf []byte, name, cniVersion string) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	m["name"], m["cniVersion"] = name, cniVersion
	return json.Marshal(m)
}

// withName sets "name" to name when the config has none, as Multus does.
func withName(conf []byte, name string) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if n, _ := m["name"].(string); n != "" || name == "" {
		return conf, nil
	}
	m["name"] = name
	return json.Marshal(m)
}

// resourceNameAnnot names a NAD's device resource (Multus reads it).
const resourceNameAnnot = "k8s.v1.cni.cncf.io/resourceName"

type nadObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Config string `json:"config"`
	} `json:"spec"`
}

func asNAD(data []byte) (*nadObject, bool) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, false
	}
	var obj nadObject
	if json.Unmarshal(js, &obj) != nil || obj.Kind != "NetworkAttachmentDefinition" {
		return nil, false
	}
	return &obj, true
}

// validateCDI runs the CDI library's own reading and validation of a spec
// file, what a container runtime does before it uses it.
func validateCDI(path string, data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty CDI spec")
	}
	_, err := cdi.ReadSpec(path, 0)
	return err
}

// parseConf parses a devplumb network config as this node's devplumb would.
func parseConf(data []byte) error {
	node, err := nodeconfig.Load(nodeconfig.Path())
	if err != nil {
		return err
	}
	_, err = config.Parse(data, node)
	return err
}
