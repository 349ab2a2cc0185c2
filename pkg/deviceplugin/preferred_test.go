package deviceplugin

import (
	"slices"
	"testing"
)

func TestPreferred(t *testing.T) {
	numa := map[string]int{"a0": 0, "a1": 0, "a2": 0, "b0": 1, "b1": 1, "x": NoNUMA}
	lookup := func(id string) int { return numa[id] }
	all := []string{"a0", "a1", "a2", "b0", "b1"}
	cases := []struct {
		name      string
		available []string
		must      []string
		size      int
		want      []string
	}{
		{"tightest single node", all, nil, 2, []string{"b0", "b1"}},
		{"only node that fits", all, nil, 3, []string{"a0", "a1", "a2"}},
		{"must-include pins the node", all, []string{"a1"}, 2, []string{"a1", "a0"}},
		{"must-include on other node", all, []string{"b1"}, 2, []string{"b1", "b0"}},
		{"rest fits one node", all, []string{"b0"}, 4, []string{"b0", "a0", "a1", "a2"}},
		{"spill keeps must node first", all, []string{"b0"}, 5, []string{"b0", "b1", "a0", "a1", "a2"}},
		{"spill fullest first", all, nil, 4, []string{"a0", "a1", "a2", "b0"}},
		{"must spanning nodes", all, []string{"a0", "b0"}, 3, []string{"a0", "b0", "b1"}},
		{"must not in available", []string{"a1"}, []string{"a0"}, 2, []string{"a0", "a1"}},
		{"fewer than size", []string{"x"}, nil, 2, []string{"x"}},
	}
	for _, c := range cases {
		got, err := Preferred(lookup, c.available, c.must, c.size)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if _, err := Preferred(lookup, all, []string{"a0", "a1"}, 1); err == nil {
		t.Error("must-include larger than size accepted")
	}
	if _, err := Preferred(lookup, all, nil, 0); err == nil {
		t.Error("size 0 accepted")
	}
}
