package plugin

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// prevResult parses the prevResult the runtime passes when devplumb is not
// the first plugin of a chain; nil when there is none.
func prevResult(stdin []byte, cniVersion string) (*current.Result, error) {
	var in struct {
		Prev map[string]any `json:"prevResult"`
	}
	if err := json.Unmarshal(stdin, &in); err != nil {
		return nil, fmt.Errorf(`"prevResult" must be a CNI result object: %w`, err)
	}
	if in.Prev == nil {
		return nil, nil
	}
	conf := &types.PluginConf{CNIVersion: cniVersion, RawPrevResult: in.Prev}
	if err := version.ParsePrevResult(conf); err != nil {
		return nil, fmt.Errorf(`"prevResult" is not a cniVersion %s result: %w`, cniVersion, err)
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, fmt.Errorf(`"prevResult": %w`, err)
	}
	return prev, nil
}

// withPrev appends the delegates' result to the chain's prevResult, as a
// plugin later in a chain must: earlier plugins' interfaces, IPs and routes
// are kept, and the delegates' IPs point at their interfaces' new indexes.
func withPrev(prev *current.Result, res types.Result) (types.Result, error) {
	if prev == nil {
		return res, nil
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("convert the delegate result: %w", err)
	}
	out := *prev
	out.Interfaces = append(slices.Clone(prev.Interfaces), r.Interfaces...)
	out.IPs = slices.Clone(prev.IPs)
	for _, ip := range r.IPs {
		moved := *ip
		if ip.Interface != nil {
			moved.Interface = current.Int(*ip.Interface + len(prev.Interfaces))
		}
		out.IPs = append(out.IPs, &moved)
	}
	out.Routes = append(slices.Clone(prev.Routes), r.Routes...)
	if out.DNS.IsEmpty() {
		out.DNS = r.DNS
	}
	return &out, nil
}
