package deviceplugin

import (
	"fmt"
	"slices"
)

// Preferred chooses size devices out of available (which the kubelet passes
// including the must-include ones). All of mustInclude come first. The rest
// come from a single NUMA node when one can supply them: the node of the
// must-include devices if they share one, else the node that fits most
// tightly, so that larger nodes stay whole for larger requests. Only when no
// node can, devices spill over nodes, fullest node first. numa maps an ID to
// its node (NoNUMA when none).
func Preferred(numa func(string) int, available, mustInclude []string, size int) ([]string, error) {
	if size <= 0 {
		return nil, fmt.Errorf("allocation size %d is not positive", size)
	}
	chosen := dedupe(mustInclude)
	if len(chosen) > size {
		return nil, fmt.Errorf("%d must-include devices exceed allocation size %d", len(chosen), size)
	}
	byNode := map[int][]string{}
	for _, id := range dedupe(available) {
		if !slices.Contains(chosen, id) {
			byNode[numa(id)] = append(byNode[numa(id)], id)
		}
	}
	need := size - len(chosen)
	for _, node := range nodeOrder(byNode, mustNode(numa, chosen), need) {
		take := min(need, len(byNode[node]))
		chosen = append(chosen, byNode[node][:take]...)
		need -= take
		if need == 0 {
			break
		}
	}
	return chosen, nil
}

// mustNode is the one node of the must-include devices, or NoNUMA.
func mustNode(numa func(string) int, must []string) int {
	node := NoNUMA
	for i, id := range must {
		n := numa(id)
		if i > 0 && n != node {
			return NoNUMA
		}
		node = n
	}
	return node
}

// nodeOrder lists the nodes to take devices from, best first.
func nodeOrder(byNode map[int][]string, preferred, need int) []int {
	nodes := make([]int, 0, len(byNode))
	for n, ids := range byNode {
		slices.Sort(ids)
		nodes = append(nodes, n)
	}
	fits := func(n int) bool { return len(byNode[n]) >= need }
	slices.SortFunc(nodes, func(a, b int) int {
		switch {
		case a == preferred && preferred != NoNUMA && fits(a):
			return -1
		case b == preferred && preferred != NoNUMA && fits(b):
			return 1
		case fits(a) && fits(b): // tightest fit first
			if len(byNode[a]) != len(byNode[b]) {
				return len(byNode[a]) - len(byNode[b])
			}
		case fits(a):
			return -1
		case fits(b):
			return 1
		case a == preferred && preferred != NoNUMA: // spill: stay near must-include first
			return -1
		case b == preferred && preferred != NoNUMA:
			return 1
		default: // spill: fullest first
			if len(byNode[a]) != len(byNode[b]) {
				return len(byNode[b]) - len(byNode[a])
			}
		}
		return a - b
	})
	return nodes
}

func dedupe(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}
