package observe

import (
	"strings"
	"sync"
)

// Claims are the nodes this process has started or is driving, as
// "rollout/node" keys: what it knows before the API shows it. A claim is a
// node the planner started whose worker has not yet written a record; a
// worker is a node a goroutine is driving.
type Claims struct {
	mu      sync.Mutex
	claims  map[string]bool
	workers map[string]bool
}

func key(rollout, node string) string { return rollout + "/" + node }

// Claim marks the node started by the planner.
func (c *Claims) Claim(rollout, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claims == nil {
		c.claims = map[string]bool{}
	}
	c.claims[key(rollout, node)] = true
}

// Unclaim drops the node's claim (its record is written).
func (c *Claims) Unclaim(rollout, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.claims, key(rollout, node))
}

// Claimed says the planner started the node and no record shows it yet.
func (c *Claims) Claimed(rollout, node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claims[key(rollout, node)]
}

// ByNode is, for each claimed node, the rollout that claimed it.
func (c *Claims) ByNode() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.claims))
	for k := range c.claims {
		if rollout, node, ok := strings.Cut(k, "/"); ok {
			out[node] = rollout
		}
	}
	return out
}

// StartWorker marks a goroutine driving the node; false when one already is.
func (c *Claims) StartWorker(rollout, node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.workers == nil {
		c.workers = map[string]bool{}
	}
	k := key(rollout, node)
	if c.workers[k] {
		return false
	}
	c.workers[k] = true
	return true
}

// EndWorker marks the node's goroutine ended.
func (c *Claims) EndWorker(rollout, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.workers, key(rollout, node))
}

// Working says a goroutine drives the node.
func (c *Claims) Working(rollout, node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.workers[key(rollout, node)]
}

// Holds says the rollout has a node claimed or a worker running.
func (c *Claims) Holds(rollout string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	prefix := rollout + "/"
	for _, m := range []map[string]bool{c.workers, c.claims} {
		for k := range m {
			if strings.HasPrefix(k, prefix) {
				return true
			}
		}
	}
	return false
}
