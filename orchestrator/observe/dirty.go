package observe

import "sync"

// Dirty collects what informer events changed since the reconcile loop
// last took it: the names of the nodes whose view may have changed (a
// node's own event, an event of a pod bound to it), or that a change may
// touch every node (a DaemonSet, a ControllerRevision, a NodeRollout's spec,
// a system-upgrade-controller job pod), which only a full pass sees.
type Dirty struct {
	mu    sync.Mutex
	nodes map[string]struct{}
	all   bool
}

// Node marks one node changed.
func (d *Dirty) Node(name string) {
	if name == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.nodes == nil {
		d.nodes = map[string]struct{}{}
	}
	d.nodes[name] = struct{}{}
}

// All marks a change that may touch every node.
func (d *Dirty) All() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.all = true
}

// Take returns what changed since the last Take and starts over.
func (d *Dirty) Take() (nodes []string, all bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for n := range d.nodes {
		nodes = append(nodes, n)
	}
	all = d.all
	d.nodes, d.all = nil, false
	return nodes, all
}
