package observe

import "sync"

// Dirty collects what changed since the reconcile loop last took it: the
// names of the nodes whose view may have changed (a node's own event, an
// event of a pod bound to it, a node whose worker ended), that a change may
// touch every node (a DaemonSet, a ControllerRevision, a NodeRollout's spec,
// a system-upgrade-controller job pod), which only a full pass sees, and
// that a worker ended, so the plan must be made again (its slot is free)
// even where no view moved.
type Dirty struct {
	mu    sync.Mutex
	nodes map[string]struct{}
	all   bool
	plan  bool
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

// Ended marks the node of a worker that ended: its view may have changed
// (its record), and its slot is free.
func (d *Dirty) Ended(name string) {
	d.Node(name)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.plan = true
}

// All marks a change that may touch every node.
func (d *Dirty) All() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.all = true
}

// Take returns what changed since the last Take and starts over: the
// nodes, whether every node may have, and whether a worker ended.
func (d *Dirty) Take() (nodes []string, all, plan bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for n := range d.nodes {
		nodes = append(nodes, n)
	}
	all, plan = d.all, d.plan
	d.nodes, d.all, d.plan = nil, false, false
	return nodes, all, plan
}
