package fleet

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/prepull"
	"github.com/nodewise/nodewise/orchestrator/roster"
)

// View is what a rollout's last full pass planned from, kept so that the
// passes informer events start rebuild only the views of the nodes the
// events named (ViewOf, roster.Roster.Update) instead of observing the
// fleet again, and plan from the facts kept with them (planner.PlanFrom).
type View struct {
	UID types.UID
	// Finished: the pass returned before observing (a finished rollout):
	// no node's change wakes it.
	Finished bool
	In       *Inputs
	// Roster keeps the node views in the order the full pass listed them,
	// so that a views pass plans over them in the same order, with what
	// the plan reads of each.
	Roster *roster.Roster
	// Unreadable are the other tools' locks the full pass could not read.
	Unreadable []string
	// changed are the nodes whose views changed since the plan was last
	// merged into the status; merged is that merge (nil: none yet).
	changed []string
	merged  *merge
}

// merge is what a merge of the plan into the status left: the order it
// merged (the roster's own slice), and the positions in it of the nodes it
// held and of those whose entries it found in flight or failed.
type merge struct {
	order     []roster.Slot
	held, out []int
}

// Update brings a node's view up to date (roster.Roster.Update; false: the
// roster has no view of it) and remembers it changed since the last merge.
func (v *View) Update(n model.NodeView) bool {
	if !v.Roster.Update(n) {
		return false
	}
	v.changed = append(v.changed, n.Name)
	return true
}

// Scope is what a merge of decision d into the status may touch
// (status.RecordOnly's only): the positions in d's order of the nodes whose
// views changed since the last merge, of those d holds and of those held
// then; and gauged, those with the entries in flight or failed then and the
// nodes in flight now (whose entries a worker moves). Both are nil when
// every entry may change: no merge yet, an order arranged since, a node
// without a place in it.
func (v *View) Scope(d planner.Decision) (only, gauged []int) {
	m := v.merged
	if m == nil || len(d.Order) == 0 || len(m.order) != len(d.Order) || &m.order[0] != &d.Order[0] {
		return nil, nil
	}
	seen := map[int]bool{}
	add := func(set *[]int, p int) {
		if !seen[p] {
			seen[p] = true
			*set = append(*set, p)
		}
	}
	names := slices.Clone(v.changed)
	for name := range d.Held {
		names = append(names, name)
	}
	for _, name := range names {
		i, ok := v.Roster.Index(name)
		p, placed := v.Roster.Pos(i)
		if !ok || !placed {
			return nil, nil
		}
		add(&only, p)
	}
	for _, p := range m.held {
		add(&only, p)
	}
	gauged = slices.Clone(only)
	for _, i := range v.Roster.InFlight() {
		if p, ok := v.Roster.Pos(i); ok { // one out of the order has no entry to gauge here
			add(&gauged, p)
		}
	}
	for _, p := range m.out {
		add(&gauged, p)
	}
	slices.Sort(only)
	slices.Sort(gauged)
	return only, gauged
}

// Merged remembers that decision d was merged into the status, and which
// of the entries gauged (at positions at of the order; nil: every entry,
// by its index) it found in flight or failed.
func (v *View) Merged(d planner.Decision, gauged []v1alpha1.NodeStatus, at []int) {
	m := &merge{order: d.Order}
	for name := range d.Held {
		if i, ok := v.Roster.Index(name); ok {
			if p, ok := v.Roster.Pos(i); ok {
				m.held = append(m.held, p)
			}
		}
	}
	for k, ns := range gauged {
		p := k
		if at != nil {
			p = at[k]
		}
		if (model.InFlight(ns.State) || ns.State == v1alpha1.NodeFailed) && p < len(d.Order) && d.Order[p].Name == ns.Name {
			m.out = append(m.out, p)
		}
	}
	v.changed, v.merged = nil, m
}

// NewView is the view of a pass's snapshot, its nodes kept by r.
func NewView(in *Inputs, snap model.Snapshot, r *roster.Roster) *View {
	return &View{In: in, Roster: r, Unreadable: snap.UnreadableLocks}
}

// Snapshot is the planner's snapshot from the kept views: what Observe
// would build, without observing the fleet again. Its nodes are the
// roster's own (not a copy): Roster.Update changes them in place.
func (v *View) Snapshot(nr *v1alpha1.NodeRollout) model.Snapshot {
	return model.Snapshot{Status: nr.Status, ResumeRequested: model.ResumeRequested(nr.Annotations), Targets: v.In.targets, UnreadableLocks: v.Unreadable, Nodes: v.Roster.Nodes()}
}

// ViewOf is one node's view from its own pods alone: the inputs of the
// fleet-wide ones (Observe) narrowed to the pods bound to the node.
func (o *Observer) ViewOf(n *corev1.Node, in *Inputs) (model.NodeView, error) {
	pods, err := o.Pods.OnNode(n.Name)
	if err != nil {
		return model.NodeView{}, err
	}
	np := &nodePods{}
	namespaces := targetNamespaces(in.targets)
	var blocking, pulls []*corev1.Pod
	for _, p := range pods {
		addTargetPod(np, p, in.targets)
		if in.blocking != nil {
			blocking = append(blocking, p)
		}
		if p.Labels[model.LabelPrepull] == in.rollout && slices.Contains(namespaces, p.Namespace) && p.DeletionTimestamp == nil {
			pulls = append(pulls, p)
		}
	}
	np.blocked = planner.BlockingPods(blocking, in.blocking)[n.Name]
	if len(pulls) > 0 {
		np.prepull = prepull.View(pulls, in.prepullWant)
	}
	return o.nodeView(n, np, in)
}
