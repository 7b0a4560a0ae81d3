// Package roster keeps a rollout's nodes with the facts its plan reads of
// each and the sums over them, so that a change to one node updates that
// node's part only and a plan walks only the nodes it may act on: those
// with an action due, those waiting, and the current window
// (planner.PlanFrom). The planner decides what the facts are; the roster
// only keeps them, in the snapshot's order and in plan order.
package roster

import (
	"slices"

	"github.com/nodewise/nodewise/orchestrator/model"
)

// Facts are what the plan reads of one node, given its policy and targets.
type Facts struct {
	Selected    bool // the rollout's selector picks it
	InFlight    bool // its persisted step is in flight: it resumes
	PrepullDone bool // its pre-pull pod has done its work
	Failed      bool
	Others      bool // unavailable through other maintenance
	// Visit: the plan's first walk may act on it (mark it done, retry
	// it, or skip it once NotReady too long).
	Visit bool
	// Finished: terminal once marked (done, skipped, failed …); Active:
	// not finished and not waiting NotReady, so its window is current.
	Finished, Active bool
	Due              bool // pending and behind the targets (or retried)
	Held             bool // due and waiting (held, blocked, NotReady)
	Hoist            bool // drained by someone else, due and not waiting
}

// Slot is one node's place in the plan (planner.PlannedNode).
type Slot struct {
	Name   string
	Zone   string
	Canary bool
	Wave   int // from 1
	// Window groups the nodes that may overlap (planner.Order), from 1;
	// the windows of an order do not decrease along it.
	Window int
}

// Roster is a snapshot's nodes, their facts and the sums over them. It is
// built for one policy and one set of targets (New's facts).
type Roster struct {
	factsOf                            func(model.NodeView) Facts
	nodes                              []model.NodeView // the snapshot's order
	facts                              []Facts
	at                                 map[string]int // name → index in nodes
	selected, failed, others, finished int
	inflight, prepullDone              []int // indices in nodes, sorted

	// Set by Arrange, for the selected nodes; stale once a node's
	// selection or zone changed.
	key                string
	stale              bool
	order              []Slot
	missing            []string
	pos                []int // index in nodes → position in order (-1: not selected)
	byPos              []int // position in order → index in nodes
	visit, held, hoist []int // positions, sorted
	active             []int // by window: how many Active nodes it has
	spanLo, spanHi     []int // by window: its positions [lo, hi)
}

// New keeps nodes (the slice itself: the roster updates it in place) with
// each node's facts by factsOf.
func New(nodes []model.NodeView, factsOf func(model.NodeView) Facts) *Roster {
	r := &Roster{factsOf: factsOf, nodes: nodes, facts: make([]Facts, len(nodes)), at: make(map[string]int, len(nodes)), stale: true}
	for i, n := range nodes {
		r.at[n.Name] = i
		r.facts[i] = factsOf(n)
		r.add(i, 1)
	}
	return r
}

// Nodes are the kept views, in the snapshot's order; shared, not copied.
func (r *Roster) Nodes() []model.NodeView { return r.nodes }

// Index is where the node named is in the snapshot's order (ok false:
// the roster has no view of it).
func (r *Roster) Index(name string) (i int, ok bool) {
	i, ok = r.at[name]
	return i, ok
}

// Pos is the position in the plan order of the node at index i of the
// snapshot's order (ok false: it has none, or the order is stale).
func (r *Roster) Pos(i int) (p int, ok bool) {
	if r.stale || i < 0 || i >= len(r.pos) || r.pos[i] < 0 {
		return 0, false
	}
	return r.pos[i], true
}

// Facts are the facts of the node at index i of the snapshot's order.
func (r *Roster) Facts(i int) Facts { return r.facts[i] }

// Update replaces the view of a node the roster has (ok false: it has
// none) and brings the sums to its new facts.
func (r *Roster) Update(n model.NodeView) bool {
	i, ok := r.at[n.Name]
	if !ok {
		return false
	}
	was, zone := r.facts[i], r.nodes[i].Zone
	r.add(i, -1)
	r.nodes[i], r.facts[i] = n, r.factsOf(n)
	if was.Selected != r.facts[i].Selected || zone != n.Zone {
		r.stale = true // the order moves: Arrange again
	}
	r.add(i, 1)
	return true
}

// add adds (sign 1) or takes away (-1) node i's part of the sums.
func (r *Roster) add(i, sign int) {
	f := r.facts[i]
	put := func(set *[]int, v int) {
		k, found := slices.BinarySearch(*set, v)
		switch {
		case sign > 0 && !found:
			*set = slices.Insert(*set, k, v)
		case sign < 0 && found:
			*set = slices.Delete(*set, k, k+1)
		}
	}
	if f.InFlight {
		put(&r.inflight, i)
	}
	if f.PrepullDone {
		put(&r.prepullDone, i)
	}
	if !f.Selected {
		return
	}
	r.selected += sign
	r.failed += sign * b2i(f.Failed)
	r.others += sign * b2i(f.Others)
	r.finished += sign * b2i(f.Finished)
	if r.stale {
		return // Arrange sums the rest
	}
	p := r.pos[i]
	if f.Visit {
		put(&r.visit, p)
	}
	if f.Held {
		put(&r.held, p)
	}
	if f.Hoist {
		put(&r.hoist, p)
	}
	if f.Active {
		r.active[r.order[p].Window] += sign
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Stale says the plan order must be made (again) for key (what it depends
// on besides the selected nodes: canaries, maxParallel): none was, a
// node's selection or zone changed since, or it was made for another key.
func (r *Roster) Stale(key string) bool { return r.stale || r.key != key }

// Selected are the selected nodes' views, in the snapshot's order.
func (r *Roster) Selected() []model.NodeView {
	out := make([]model.NodeView, 0, r.selected)
	for i, n := range r.nodes {
		if r.facts[i].Selected {
			out = append(out, n)
		}
	}
	return out
}

// Arrange keeps order, the plan order of the selected nodes made for key,
// and sums what goes by position and window.
func (r *Roster) Arrange(key string, order []Slot, missing []string) {
	r.key, r.stale, r.order, r.missing = key, false, order, missing
	r.pos, r.byPos = make([]int, len(r.nodes)), make([]int, len(order))
	r.visit, r.held, r.hoist = nil, nil, nil
	last := 0
	for _, s := range order {
		last = max(last, s.Window)
	}
	r.active, r.spanLo, r.spanHi = make([]int, last+1), make([]int, last+1), make([]int, last+1)
	for i := range r.pos {
		r.pos[i] = -1
	}
	for p, s := range order {
		i := r.at[s.Name]
		r.pos[i], r.byPos[p] = p, i
		if r.spanHi[s.Window] == 0 {
			r.spanLo[s.Window] = p
		}
		r.spanHi[s.Window] = p + 1
		f := r.facts[i]
		if f.Visit {
			r.visit = append(r.visit, p)
		}
		if f.Held {
			r.held = append(r.held, p)
		}
		if f.Hoist {
			r.hoist = append(r.hoist, p)
		}
		if f.Active {
			r.active[s.Window]++
		}
	}
}

// Order is the plan order and the canaries missing from it (Arrange).
func (r *Roster) Order() ([]Slot, []string) { return r.order, r.missing }

// At is the view and facts of the node at position p of the order.
func (r *Roster) At(p int) (*model.NodeView, Facts) {
	i := r.byPos[p]
	return &r.nodes[i], r.facts[i]
}

// Counts are the selected nodes, and of them the failed, those other
// maintenance makes unavailable, and the finished.
func (r *Roster) Counts() (selected, failed, others, finished int) {
	return r.selected, r.failed, r.others, r.finished
}

// InFlight are the indices of the nodes (selected or not) in flight, in
// the snapshot's order.
func (r *Roster) InFlight() []int { return r.inflight }

// PrepullDone are the indices of the nodes (selected or not) whose
// pre-pull pod has done its work, in the snapshot's order.
func (r *Roster) PrepullDone() []int { return r.prepullDone }

// Node is the view at index i of the snapshot's order.
func (r *Roster) Node(i int) *model.NodeView { return &r.nodes[i] }

// Visit are the positions of the nodes the plan's first walk may act on,
// in plan order.
func (r *Roster) Visit() []int { return r.visit }

// Held are the positions of the nodes due and waiting, in plan order.
func (r *Roster) Held() []int { return r.held }

// Hoist are the positions of the nodes drained by someone else, due and
// not waiting, in plan order.
func (r *Roster) Hoist() []int { return r.hoist }

// Current is the lowest window with an Active node (0: none).
func (r *Roster) Current() int {
	for w, n := range r.active {
		if n > 0 {
			return w
		}
	}
	return 0
}

// Span are the positions [lo, hi) of window w's nodes (empty for none).
func (r *Roster) Span(w int) (lo, hi int) {
	if w <= 0 || w >= len(r.spanHi) {
		return 0, 0
	}
	return r.spanLo[w], r.spanHi[w]
}
