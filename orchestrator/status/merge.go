package status

import (
	"cmp"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// mergeAll merges the plan into every entry of s: each planned node's
// entry (added when it has none) takes its place in the plan, its settled
// record and why it is held; the Pending entries of nodes no longer
// planned go; the counts are counted again.
func mergeAll(s *v1alpha1.NodeRolloutStatus, d planner.Decision, settled map[string]v1alpha1.NodeState, now metav1.Time) {
	// The entries mostly stand in plan order: one index for the whole plan
	// only once one does not (nodeEntry per node would be quadratic in
	// the fleet, every pass).
	var at map[string]int
	for k, pn := range d.Order {
		i, ok := k, k < len(s.Nodes) && s.Nodes[k].Name == pn.Name
		if !ok {
			if at == nil {
				at = make(map[string]int, len(s.Nodes))
				for i := range s.Nodes {
					at[s.Nodes[i].Name] = i
				}
			}
			i, ok = at[pn.Name]
		}
		if !ok {
			s.Nodes = append(s.Nodes, v1alpha1.NodeStatus{Name: pn.Name, State: v1alpha1.NodePending})
			i = len(s.Nodes) - 1
			at[pn.Name] = i
		}
		mergeEntry(&s.Nodes[i], pn, d, settled, &now, ok || s.Omitted == nil)
	}
	if d.Phase != v1alpha1.PhasePending {
		s.Nodes = pruneUnplanned(s.Nodes, d.Order)
	}
	if len(d.Order) > 0 {
		s.Omitted = nil // every planned node has its entry again, an omitted one too
	}
	s.Counts = planner.Counts(s.Nodes)
}

// mergeEntry merges the plan into ns, the entry of planned node pn: its
// place in the plan, its settled record (settled; lost tells an entry
// whose write was lost from one a degraded status omitted, write/omit.go)
// and why it is held (d.Held).
func mergeEntry(ns *v1alpha1.NodeStatus, pn planner.PlannedNode, d planner.Decision, settled map[string]v1alpha1.NodeState, now *metav1.Time, lost bool) {
	ns.Zone, ns.Canary, ns.Wave = pn.Zone, pn.Canary, int32(pn.Wave)
	if st, found := settled[pn.Name]; found && ns.State != st {
		ns.State, ns.StateSince = st, now
		if lost {
			ns.Reason, ns.FinishTime = fmt.Sprintf("status caught up with the node's record (%s): the status write behind it was lost with its leader", st), cmp.Or(ns.FinishTime, now)
		}
	}
	ns.Reason = planner.HeldReason(*ns, d.Held[pn.Name])
}

// Aligned says RecordOnly may merge the plan into the entries at the
// positions only of d.Order alone: s's entries are the plan's, in plan
// order, none omitted, and those at only are the nodes planned there.
func Aligned(s v1alpha1.NodeRolloutStatus, d planner.Decision, only []int) bool {
	if s.Omitted != nil || len(s.Nodes) != len(d.Order) {
		return false
	}
	for _, p := range only {
		if p < 0 || p >= len(s.Nodes) || s.Nodes[p].Name != d.Order[p].Name {
			return false
		}
	}
	return true
}

// mergeOnly merges the plan into the entries at only (Aligned), bringing
// the counts along with each entry changed; a changed entry goes to put
// when given, else into s.
func mergeOnly(s *v1alpha1.NodeRolloutStatus, d planner.Decision, settled map[string]v1alpha1.NodeState, now metav1.Time, only []int, put func(int, v1alpha1.NodeStatus)) {
	for _, p := range only {
		was := &s.Nodes[p]
		ns := *was
		mergeEntry(&ns, d.Order[p], d, settled, &now, true)
		if ns.Zone == was.Zone && ns.Canary == was.Canary && ns.Wave == was.Wave && ns.State == was.State &&
			ns.StateSince == was.StateSince && ns.Reason == was.Reason && ns.FinishTime == was.FinishTime {
			continue // the fields mergeEntry sets, as they were
		}
		count(&s.Counts, was.State, -1)
		count(&s.Counts, ns.State, 1)
		if put != nil {
			put(p, ns)
		} else {
			*was = ns
		}
	}
}

// count adds sign to the count of state in c, as planner.Counts counts.
func count(c *v1alpha1.RolloutCounts, state v1alpha1.NodeState, sign int32) {
	switch {
	case state == v1alpha1.NodeDone:
		c.Done += sign
	case state == v1alpha1.NodeSkipped:
		c.Skipped += sign
	case state == v1alpha1.NodeFailed:
		c.Failed += sign
	case state == v1alpha1.NodeRolledBack:
		c.RolledBack += sign
	case model.InFlight(state):
		c.InProgress += sign
	default:
		c.Pending += sign
	}
}

// Edit is one entry a merge changed: the entry at index I of the status's
// node entries, as it is now.
type Edit struct {
	I     int
	Entry v1alpha1.NodeStatus
}

// Preview is what RecordOnly makes of prev, without changing prev or
// copying its node entries: the status with every field but the entries
// as RecordOnly leaves it (its entries prev's, shared: read them, never
// change them) and the entries it changes. ok is false when prev's entries
// do not stand in plan order (Aligned): every entry is merged then
// (Record, on a copy).
func Preview(prev v1alpha1.NodeRolloutStatus, nr *v1alpha1.NodeRollout, d planner.Decision, targets []model.TargetView, settled map[string]v1alpha1.NodeState, now metav1.Time, only []int) (next v1alpha1.NodeRolloutStatus, edits []Edit, ok bool) {
	if only == nil || !Aligned(prev, d, only) {
		return prev, nil, false
	}
	nodes := prev.Nodes
	prev.Nodes = nil
	next = *prev.DeepCopy()
	next.Nodes = nodes
	RecordOnly(&next, nr, d, targets, settled, now, only, func(i int, ns v1alpha1.NodeStatus) {
		edits = append(edits, Edit{I: i, Entry: ns})
	})
	return next, edits, true
}

// Gauged are the entries the node-state gauges read: those of next (prev's
// entries with edits over them: Preview) at the positions gauged, when they
// hold every entry in flight or failed (next's counts say how many); else
// every entry, edits applied (whole).
func Gauged(next v1alpha1.NodeRolloutStatus, edits []Edit, gauged []int) (entries []v1alpha1.NodeStatus, whole bool) {
	at := func(i int) v1alpha1.NodeStatus {
		for _, e := range edits {
			if e.I == i {
				return e.Entry
			}
		}
		return next.Nodes[i]
	}
	if gauged != nil {
		var out int32
		for _, p := range gauged {
			ns := at(p)
			entries = append(entries, ns)
			if model.InFlight(ns.State) || ns.State == v1alpha1.NodeFailed {
				out++
			}
		}
		if out == next.Counts.InProgress+next.Counts.Failed {
			return entries, false
		}
	}
	entries = slices.Clone(next.Nodes)
	for _, e := range edits {
		entries[e.I] = e.Entry
	}
	return entries, true
}
