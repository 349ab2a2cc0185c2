package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// The commands; CDI_COMMAND is read case-insensitively.
const (
	CmdVersion = "VERSION"
	CmdInfo    = "INFO"
	CmdAdd     = "ADD"
	CmdDel     = "DEL"
)

// The environment variables of the draft.
const (
	EnvCommand      = "CDI_COMMAND"
	EnvVersion      = "CDI_VERSION"
	EnvRequest      = "CDI_REQUEST"
	EnvRequestID    = "CDI_REQUEST_ID"
	EnvNUMALocality = "CDI_REQUEST_NUMA_LOCALITY"
)

// Versions are the versions of the draft this package speaks, oldest first:
// 0.0.1 (the examples' configs and replies) and 0.0.2 (the draft's own
// version, which its VERSION example reports).
var Versions = []string{"0.0.1", "0.0.2"}

// VersionReply answers VERSION.
type VersionReply struct {
	CDIVersion        string   `json:"cdiVersion"`
	SupportedVersions []string `json:"supportedVersions"`
}

// AddReply answers a successful ADD. Devices is always written, empty or not.
type AddReply struct {
	CDIVersion   string   `json:"cdiVersion"`
	Devices      []string `json:"devices"`
	NUMALocality []int    `json:"numa_locality,omitempty"`
}

// InfoReply answers INFO: resource-spec -> available amount, beside
// cdiVersion in one flat object.
type InfoReply struct {
	CDIVersion string
	Available  map[string]int64
}

// MarshalJSON writes the flat object.
func (r InfoReply) MarshalJSON() ([]byte, error) {
	m := map[string]any{"cdiVersion": r.CDIVersion}
	for k, v := range r.Available {
		m[k] = v
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the flat object; every key but cdiVersion must be an
// integer amount.
func (r *InfoReply) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	out := InfoReply{Available: map[string]int64{}}
	for k, raw := range m {
		if k == "cdiVersion" {
			if err := json.Unmarshal(raw, &out.CDIVersion); err != nil {
				return fmt.Errorf("cdiVersion: %w", err)
			}
			continue
		}
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("INFO amount of %q is not an integer: %s", k, raw)
		}
		out.Available[k] = n
	}
	*r = out
	return nil
}

// CheckInfo applies the draft's rule to INFO amounts: the config's
// resource-type must be there, and only it and its subtypes, with
// non-negative amounts.
func CheckInfo(typ string, available map[string]int64) error {
	if _, ok := available[typ]; !ok {
		return fmt.Errorf("INFO does not mention its resource-type %q", typ)
	}
	keys := make([]string, 0, len(available))
	for k := range available {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t, _, err := SplitResourceSpec(k)
		if err != nil {
			return fmt.Errorf("INFO advertises %q: %w", k, err)
		}
		if t != typ {
			return fmt.Errorf("INFO advertises %q, which is not %q or a subtype of it", k, typ)
		}
		if available[k] < 0 {
			return fmt.Errorf("INFO amount of %q is negative", k)
		}
	}
	return nil
}

// checkVersions is the rule for a VERSION reply.
func (r *VersionReply) check() error {
	if r.CDIVersion == "" {
		return fmt.Errorf("VERSION reply has no cdiVersion")
	}
	if r.SupportedVersions == nil {
		return fmt.Errorf("VERSION reply has no supportedVersions")
	}
	return nil
}

// check is the rule for an ADD reply.
func (r *AddReply) check() error {
	if r.CDIVersion == "" {
		return fmt.Errorf("ADD reply has no cdiVersion")
	}
	if r.Devices == nil {
		return fmt.Errorf("ADD reply has no devices (it must be there, even empty)")
	}
	for _, d := range r.Devices {
		if !strings.HasPrefix(d, "/") {
			return fmt.Errorf("ADD reply device %q is not an absolute path of a host device node", d)
		}
	}
	for _, n := range r.NUMALocality {
		if n < 0 {
			return fmt.Errorf("ADD reply numa_locality has %d, not a NUMA node ID", n)
		}
	}
	return nil
}
