package devnodes

import (
	"slices"

	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
)

// Plugin is the protocol.Plugin of cdi-devnodes.
type Plugin struct{}

// Handler serves Plugin with the draft's rules.
func Handler() protocol.Handler { return protocol.Handler{Plugin: Plugin{}} }

// Info counts the free nodes.
func (Plugin) Info(req *protocol.Request) (map[string]int64, error) {
	a, err := parseArgs(req.Config)
	if err != nil {
		return nil, err
	}
	var free int64
	err = withState(a.StateDir, req.Config.Type, func(st *State) (bool, error) {
		nodes, err := available(a)
		if err != nil {
			return false, err
		}
		claimed := st.claimed()
		for _, n := range nodes {
			if _, taken := claimed[n.Path]; !taken {
				free++
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return map[string]int64{req.Config.Type: free}, nil
}

// Add claims the requested number of free nodes for the request ID, all or
// none, preferring nodes on the NUMA nodes the caller named.
func (Plugin) Add(req *protocol.Request) (*protocol.AddResult, error) {
	a, err := parseArgs(req.Config)
	if err != nil {
		return nil, err
	}
	want := int(req.Resources[0].Amount) // Supports admits only the type itself
	var chosen []node
	err = withState(a.StateDir, req.Config.Type, func(st *State) (bool, error) {
		if _, dup := st.Requests[req.RequestID]; dup {
			return false, errorf(CodeIDInUse, "Request ID in use", "request ID %s already holds devices (DEL it first)", req.RequestID)
		}
		nodes, err := available(a)
		if err != nil {
			return false, err
		}
		free := freeNodes(nodes, st.claimed())
		if len(free) < want {
			return false, errorf(CodeNotEnough, "Not enough free devices", "%s: asked for %d, %d free", req.Config.Type, want, len(free))
		}
		chosen = pick(free, want, req.NUMALocality)
		st.Requests[req.RequestID] = Claim{Devices: paths(chosen)}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &protocol.AddResult{Devices: paths(chosen), NUMALocality: locality(chosen)}, nil
}

// Del returns the request's nodes; an unknown request ID is error 5.
func (Plugin) Del(req *protocol.Request) error {
	a, err := parseArgs(req.Config)
	if err != nil {
		return err
	}
	return withState(a.StateDir, req.Config.Type, func(st *State) (bool, error) {
		if _, ok := st.Requests[req.RequestID]; !ok {
			return false, protocol.NewError(protocol.ErrCodeRequestID, "Unknown request ID", "request ID %s holds no devices", req.RequestID)
		}
		delete(st.Requests, req.RequestID)
		return true, nil
	})
}

func freeNodes(nodes []node, claimed map[string]string) []node {
	var out []node
	for _, n := range nodes {
		if _, taken := claimed[n.Path]; !taken {
			out = append(out, n)
		}
	}
	return out
}

// pick takes want nodes, those on the wanted NUMA nodes first, each group
// in natural order.
func pick(free []node, want int, numa []int) []node {
	near := func(n node) bool { return slices.Contains(numa, n.NUMA) }
	var first, rest []node
	for _, n := range free {
		if len(numa) > 0 && near(n) {
			first = append(first, n)
		} else {
			rest = append(rest, n)
		}
	}
	return append(first, rest...)[:want]
}

func paths(nodes []node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Path
	}
	return out
}

// locality lists the known NUMA nodes of the chosen nodes, sorted.
func locality(nodes []node) []int {
	var out []int
	for _, n := range nodes {
		if n.NUMA >= 0 && !slices.Contains(out, n.NUMA) {
			out = append(out, n.NUMA)
		}
	}
	slices.Sort(out)
	return out
}
