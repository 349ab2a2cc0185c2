package config

import (
	"bytes"
	"container/list"
	"maps"
	"slices"
	"sync"

	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// Cache is Parse for a process that serves many calls (the node agent): a
// network's config reaches it the same, byte for byte, on every call (Multus
// passes the NAD's), and parsing it again, strictly, was a fourteenth of the
// agent's instructions for an ADD. A config is kept only under its exact
// bytes and the node config it was parsed with, and only when it parsed;
// each call gets a copy of its own. A config with a prevResult (a DEL's, a
// chained call's) is never the same twice and is not kept: it would only
// push out those that are. At most cacheEntries configs of at most
// cacheMaxBytes each are kept, the least recently used going first, so a NAD
// author cannot grow the agent's memory with configs.
type Cache struct {
	mu      sync.Mutex
	entries map[cacheKey]*list.Element // of *cacheEntry, in order
	order   list.List                  // most recently used first
}

const (
	cacheEntries  = 64
	cacheMaxBytes = 16 << 10
)

type cacheKey struct {
	node nodeconfig.Node
	data string
}

type cacheEntry struct {
	key  cacheKey
	conf *NetConf
}

// Parse is the package's Parse of data with node, from the cache when the
// same bytes parsed with the same node config before.
func (c *Cache) Parse(data []byte, node *nodeconfig.Node) (*NetConf, error) {
	if node == nil {
		node = nodeconfig.Defaults()
	}
	if len(data) > cacheMaxBytes || bytes.Contains(data, []byte(`"prevResult"`)) {
		return Parse(data, node)
	}
	key := cacheKey{node: *node, data: string(data)}
	if conf := c.get(key); conf != nil {
		return conf.clone(), nil
	}
	conf, err := Parse(data, node)
	if err != nil {
		return nil, err
	}
	c.put(key, conf.clone())
	return conf, nil
}

func (c *Cache) get(key cacheKey) *NetConf {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return nil
	}
	c.order.MoveToFront(e)
	return e.Value.(*cacheEntry).conf
}

func (c *Cache) put(key cacheKey, conf *NetConf) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[cacheKey]*list.Element{}
	}
	if _, ok := c.entries[key]; ok {
		return // another call parsed it meanwhile
	}
	c.entries[key] = c.order.PushFront(&cacheEntry{key: key, conf: conf})
	if c.order.Len() > cacheEntries {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.entries, last.Value.(*cacheEntry).key)
	}
}

// clone is a copy of c sharing nothing a caller could change.
func (c *NetConf) clone() *NetConf {
	out := *c
	out.InjectDeviceID = slices.Clone(c.InjectDeviceID)
	out.Capabilities = maps.Clone(c.Capabilities)
	out.RuntimeConfig.Raw = cloneJSON(c.RuntimeConfig.Raw)
	out.ValidAttachments = slices.Clone(c.ValidAttachments)
	if c.LogToStderr != nil {
		v := *c.LogToStderr
		out.LogToStderr = &v
	}
	if c.Delegates != nil {
		out.Delegates = make([]map[string]any, len(c.Delegates))
		for i, d := range c.Delegates {
			out.Delegates[i] = cloneJSON(d)
		}
	}
	return &out
}

// cloneJSON is a deep copy of a decoded JSON object.
func cloneJSON(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return cloneJSON(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneValue(e)
		}
		return out
	}
	return v // string, float64, bool, nil, json.Number: values
}
