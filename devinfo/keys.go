package devinfo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// specKeys are the keys of spec section 3: the top-level map's, and each
// type map's under its type's name.
var specKeys = map[string][]string{
	"":            {"type", "version", TypePCI, TypeVDPA, TypeVhostUser, TypeMemif},
	TypePCI:       {"pci-address", "vhost-net", "rdma-device", "pf-pci-address", "representor-device"},
	TypeVDPA:      {"parent-device", "driver", "path", "pci-address", "pf-pci-address", "representor-device"},
	TypeVhostUser: {"mode", "path"},
	TypeMemif:     {"role", "path", "mode"},
}

// checkKeys reports what encoding/json forgives but a reader of the spec
// does not: Go matches keys case-insensitively and lets the last of two
// equal keys win, so {"Type": "pci"} or two "type" keys would pass here and
// mean something else (or nothing) to a CNI plugin in another language.
// Keys the spec does not name, in no case, are extensions and stay valid.
func checkKeys(data []byte) []error {
	var errs []error
	top, err := objectKeys(data)
	if err != nil {
		return nil // not an object: json.Unmarshal has said so
	}
	errs = append(errs, keyErrors("", top)...)
	for _, typ := range specKeys[""][2:] {
		raw, ok := top.values[typ]
		if !ok {
			continue
		}
		if sub, err := objectKeys(raw); err == nil {
			errs = append(errs, keyErrors(typ, sub)...)
		}
	}
	return errs
}

func keyErrors(mapName string, obj *object) []error {
	var errs []error
	seen := map[string]bool{}
	for _, k := range obj.keys {
		name := k
		if mapName != "" {
			name = mapName + "." + k
		}
		if seen[k] {
			errs = append(errs, fmt.Errorf("%s: appears twice (JSON readers disagree on which one counts)", name))
		}
		seen[k] = true
		for _, want := range specKeys[mapName] {
			if k != want && strings.EqualFold(k, want) {
				errs = append(errs, fmt.Errorf("%s: keys are case-sensitive: the spec's key is %q", name, want))
			}
		}
	}
	return errs
}

// object is a JSON object's keys in order, and the last value of each.
type object struct {
	keys   []string
	values map[string]json.RawMessage
}

func objectKeys(data []byte) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	obj := &object{values: map[string]json.RawMessage{}}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		obj.keys = append(obj.keys, key)
		obj.values[key] = val
	}
	return obj, nil
}
