package dashboard

import (
	"cmp"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// The rollout page at fleet scale: a map with a cell for every node, the
// filters that pick the nodes the list shows, and one page of that list.
// The map is every node whatever the filter; the list is at most
// listPageSize rows, so the page's size grows by a cell, not a row, a node.

// listPageSize is how many nodes the rollout page lists at once.
const listPageSize = 100

// A node's kind is what the list's filter (?show=) picks it by.
const (
	showAll      = ""
	showFailed   = "failed"
	showInFlight = "inflight"
	showWaiting  = "waiting"
	showDone     = "done"
	showSkipped  = "skipped"
)

// kinds are the filters in the order the page offers them, each with its
// legend's class (the map cell's colour and pattern).
var kinds = []struct{ key, label, class string }{
	{showFailed, "Failed", "bad"},
	{showInFlight, "In flight", "busy"},
	{showWaiting, "Waiting", "idle"},
	{showDone, "Done", "good"},
	{showSkipped, "Skipped", "muted"},
}

// Why a waiting (Pending) node waits (?show=waiting&why=), from the reason
// the orchestrator writes on its status entry: nothing but its turn, another
// maintenance tool holding it (Kured's lock, a system-upgrade-controller
// plan, another NodeRollout), a pod matching spec.blocking.podSelector, the
// node NotReady, or a reason of another kind.
const (
	whyTurn     = "turn"
	whyHeld     = "held"
	whyBlocked  = "blocked"
	whyNotReady = "notready"
	whyOther    = "other"
)

var whys = []struct{ key, label string }{
	{whyHeld, "held by other maintenance"},
	{whyBlocked, "blocked by a pod"},
	{whyNotReady, "NotReady"},
	{whyOther, "another reason"},
	{whyTurn, "not yet its turn"},
}

// fleetQuery is what the rollout page's query asks for: a kind of node
// (and, for waiting ones, why), and a page of the list, from 1.
type fleetQuery struct {
	Show, Why string
	Page      int
}

// parseFleetQuery reads ?show=, ?why= and ?page=; a value it does not know
// is an error naming the allowed ones.
func parseFleetQuery(v url.Values) (fleetQuery, error) {
	q := fleetQuery{Show: v.Get("show"), Why: v.Get("why"), Page: 1}
	if !knownShow(q.Show) {
		var keys []string
		for _, k := range kinds {
			keys = append(keys, k.key)
		}
		return q, fmt.Errorf("show=%s is not one of %s (or none, for every node)", q.Show, strings.Join(keys, ", "))
	}
	if q.Why != "" && (q.Show != showWaiting || !knownWhy(q.Why)) {
		var keys []string
		for _, w := range whys {
			keys = append(keys, w.key)
		}
		return q, fmt.Errorf("why=%s goes with show=waiting and is one of %s", q.Why, strings.Join(keys, ", "))
	}
	if p := v.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return q, fmt.Errorf("page=%s is not a page number (1, 2, …)", p)
		}
		q.Page = n
	}
	return q, nil
}

func knownShow(s string) bool {
	if s == showAll {
		return true
	}
	for _, k := range kinds {
		if k.key == s {
			return true
		}
	}
	return false
}

func knownWhy(s string) bool {
	for _, w := range whys {
		if w.key == s {
			return true
		}
	}
	return false
}

// href is the query's link, relative to the rollout page ("?" for every
// node's first page).
func (q fleetQuery) href() string {
	v := url.Values{}
	if q.Show != "" {
		v.Set("show", q.Show)
	}
	if q.Why != "" {
		v.Set("why", q.Why)
	}
	if q.Page > 1 {
		v.Set("page", strconv.Itoa(q.Page))
	}
	return "?" + v.Encode()
}

// nodeKind is the filter that picks a node in state s.
func nodeKind(s v1alpha1.NodeState) string {
	switch {
	case s == v1alpha1.NodeFailed:
		return showFailed
	case s == v1alpha1.NodeDone || s == v1alpha1.NodeRolledBack:
		return showDone
	case s == v1alpha1.NodeSkipped:
		return showSkipped
	case inFlight(s):
		return showInFlight
	}
	return showWaiting
}

// waitWhy reads why a Pending node waits from its status reason (the
// orchestrator's planner writes "waiting: " and the holder's words).
func waitWhy(reason string) string {
	r, held := strings.CutPrefix(reason, "waiting: ")
	switch {
	case reason == "":
		return whyTurn
	case !held:
		return whyOther
	case strings.HasPrefix(r, "NotReady"):
		return whyNotReady
	case strings.HasPrefix(r, "blocked by pod "):
		return whyBlocked
	}
	return whyHeld
}

// fleetMap is every node of a rollout as one cell, in the planned order,
// in blocks of one zone (the canaries in a block of their own) and, within
// a block, runs of one wave: a block a zone whatever the order.
type fleetMap struct {
	// Show is the filter, whose nodes' cells stand out ("" for none).
	Show   string
	Blocks []mapBlock
	block  map[string]int // Blocks' index by zone ("canary" for the canaries')
}

type mapBlock struct {
	Canary bool
	Zone   string
	// Nodes counts the block's cells; FirstWave and LastWave bound its waves.
	Nodes               int
	FirstWave, LastWave int32
	Waves               []mapWave
}

type mapWave struct {
	Wave  int32
	Cells []mapCell
}

// mapCell is one node: its class is its colour and its pattern (readable
// without colour), its label (its name, state, wave and, for a node that
// waits on something, why) shows on hover and keyboard focus and is what a
// screen reader says.
type mapCell struct {
	Name, Class, Label string
}

// fleetFilter is one of the page's filters: a legend entry of the map and
// a link that lists those nodes.
type fleetFilter struct {
	Key, Label, Class, Href string
	Count                   int
	On                      bool
	// Whys splits the waiting nodes by why they wait.
	Whys []fleetFilter
}

// nodeList is one page of the nodes the filter picks, in the planned order,
// grouped by wave and zone.
type nodeList struct {
	// What names the nodes listed ("every node", "failed nodes", …).
	What         string
	From, To, Of int
	Page, Pages  int
	Prev, Next   string
	Groups       []nodeGroup
}

// buildFleet is the map, the filters and the page of the list that q asks
// for, in one pass over the nodes.
func buildFleet(rollout string, nodes []v1alpha1.NodeStatus, q fleetQuery, now time.Time) (fleetMap, []fleetFilter, nodeList) {
	m := fleetMap{Show: q.Show}
	counts := map[string]int{}
	var picked []int
	for i := range nodes {
		n := &nodes[i]
		kind, why := nodeKind(n.State), ""
		if kind == showWaiting {
			why = waitWhy(n.Reason)
			counts[kind+"/"+why]++
		}
		counts[kind]++
		if (q.Show == showAll || q.Show == kind) && (q.Why == "" || q.Why == why) {
			picked = append(picked, i)
		}
		m.add(n, mapCell{Name: n.Name, Class: cellClass(n.State, why), Label: cellLabel(n, why)})
	}
	return m, fleetFilters(q, len(nodes), counts), pageOfNodes(rollout, nodes, picked, q, now)
}

// add puts n's cell last in its zone's block (the canaries' block for a
// canary), in a new run when the block's last is of another wave. The
// status lists nodes in the planned order, zone by zone; an entry added
// after a re-plan comes last, and still lands in its zone's block.
func (m *fleetMap) add(n *v1alpha1.NodeStatus, c mapCell) {
	key := "zone " + n.Zone
	if n.Canary {
		key = "canary"
	}
	i, ok := m.block[key]
	if !ok {
		if m.block == nil {
			m.block = map[string]int{}
		}
		i = len(m.Blocks)
		m.block[key] = i
		m.Blocks = append(m.Blocks, mapBlock{Canary: n.Canary, Zone: n.Zone, FirstWave: n.Wave, LastWave: n.Wave})
	}
	b := &m.Blocks[i]
	if w := len(b.Waves) - 1; w < 0 || b.Waves[w].Wave != n.Wave {
		b.Waves = append(b.Waves, mapWave{Wave: n.Wave})
	}
	b.Waves[len(b.Waves)-1].Cells = append(b.Waves[len(b.Waves)-1].Cells, c)
	b.Nodes++
	b.FirstWave, b.LastWave = min(b.FirstWave, n.Wave), max(b.LastWave, n.Wave)
}

// cellClass is a cell's colour and pattern: the state's class, and "wait"
// for a node that waits on something other than its turn.
func cellClass(s v1alpha1.NodeState, why string) string {
	if why != "" && why != whyTurn {
		return "wait"
	}
	return stateClass(s)
}

func cellLabel(n *v1alpha1.NodeStatus, why string) string {
	state := cmp.Or(string(n.State), string(v1alpha1.NodePending))
	l := n.Name + ": " + state + ", wave " + strconv.Itoa(int(n.Wave))
	if why != "" && why != whyTurn {
		l += "; " + n.Reason
	}
	return l
}

// fleetFilters are every filter with its count, q's marked on.
func fleetFilters(q fleetQuery, total int, counts map[string]int) []fleetFilter {
	out := []fleetFilter{{Key: showAll, Label: "All", Href: fleetQuery{}.href(), Count: total, On: q.Show == showAll}}
	for _, k := range kinds {
		f := fleetFilter{Key: k.key, Label: k.label, Class: k.class, Href: fleetQuery{Show: k.key}.href(), Count: counts[k.key], On: q.Show == k.key && q.Why == ""}
		if k.key == showWaiting {
			for _, w := range whys {
				f.Whys = append(f.Whys, fleetFilter{Key: w.key, Label: w.label, Class: cellClass(v1alpha1.NodePending, w.key), Href: fleetQuery{Show: k.key, Why: w.key}.href(),
					Count: counts[k.key+"/"+w.key], On: q.Show == k.key && q.Why == w.key})
			}
		}
		out = append(out, f)
	}
	return out
}

// pageOfNodes is the page q asks for (the last, past the end) of the picked
// nodes, in groups of one wave and zone.
func pageOfNodes(rollout string, nodes []v1alpha1.NodeStatus, picked []int, q fleetQuery, now time.Time) nodeList {
	l := nodeList{What: listWhat(q), Of: len(picked), Pages: max(1, (len(picked)+listPageSize-1)/listPageSize)}
	l.Page = min(q.Page, l.Pages)
	from, to := (l.Page-1)*listPageSize, min(l.Page*listPageSize, len(picked))
	if from < to {
		l.From, l.To = from+1, to
	}
	if l.Page > 1 {
		l.Prev = fleetQuery{Show: q.Show, Why: q.Why, Page: l.Page - 1}.href()
	}
	if l.Page < l.Pages {
		l.Next = fleetQuery{Show: q.Show, Why: q.Why, Page: l.Page + 1}.href()
	}
	for _, i := range picked[from:to] {
		n := &nodes[i]
		last := len(l.Groups) - 1
		if last < 0 || l.Groups[last].Wave != n.Wave || l.Groups[last].Zone != n.Zone || l.Groups[last].Canary != n.Canary {
			l.Groups = append(l.Groups, nodeGroup{Wave: n.Wave, Zone: n.Zone, Canary: n.Canary})
			last++
		}
		l.Groups[last].Nodes = append(l.Groups[last].Nodes, newNodeRow(rollout, n, now))
	}
	return l
}

// listWhat names the nodes q lists.
func listWhat(q fleetQuery) string {
	switch q.Show {
	case showAll:
		return "every node"
	case showInFlight:
		return "nodes in flight"
	}
	what := q.Show + " nodes"
	for _, w := range whys {
		if w.key == q.Why {
			what += ": " + w.label
		}
	}
	return what
}
