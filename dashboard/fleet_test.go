package dashboard

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// fleet60 is fleetRollout's 60 nodes, whose plan is: the canary node-0001
// (wave 1); zone-a's other 19 nodes in waves 2–6 of 1, 2, 4, 8 and 4 nodes
// (plan positions 1–19); zone-b's 20 in wave 7 (20–39); zone-c's 20 in
// wave 8 (40–59). Positions 0–23 are done but 2, 6, 11, 16 and 21
// (skipped), 24–35 in flight, 37 NotReady, 41 held by Kured, 45 blocked.
func fleet60() []v1alpha1.NodeStatus { return fleetRollout("big", 60).Status.Nodes }

func TestFleetMapGroupsByZoneAndWave(t *testing.T) {
	nodes := fleet60()
	m, _, _ := buildFleet("big", nodes, fleetQuery{Page: 1}, t0)
	type wave struct {
		wave  int32
		cells int
	}
	type block struct {
		canary      bool
		zone        string
		nodes       int
		first, last int32
		waves       []wave
	}
	var got []block
	var cells []mapCell
	for _, b := range m.Blocks {
		g := block{b.Canary, b.Zone, b.Nodes, b.FirstWave, b.LastWave, nil}
		for _, w := range b.Waves {
			g.waves = append(g.waves, wave{w.Wave, len(w.Cells)})
			cells = append(cells, w.Cells...)
		}
		got = append(got, g)
	}
	want := []block{
		{true, "zone-a", 1, 1, 1, []wave{{1, 1}}},
		{false, "zone-a", 19, 2, 6, []wave{{2, 1}, {3, 2}, {4, 4}, {5, 8}, {6, 4}}},
		{false, "zone-b", 20, 7, 7, []wave{{7, 20}}},
		{false, "zone-c", 20, 8, 8, []wave{{8, 20}}},
	}
	if !slices.EqualFunc(got, want, func(a, b block) bool {
		return a.canary == b.canary && a.zone == b.zone && a.nodes == b.nodes && a.first == b.first && a.last == b.last && slices.Equal(a.waves, b.waves)
	}) {
		t.Errorf("blocks:\n got %+v\nwant %+v", got, want)
	}
	if len(cells) != len(nodes) {
		t.Fatalf("%d cells for %d nodes", len(cells), len(nodes))
	}
	for i, n := range nodes { // every node once, in the planned order
		if cells[i].Name != n.Name {
			t.Fatalf("cell %d is %s, want %s", i, cells[i].Name, n.Name)
		}
	}
	// An entry out of the planned order (added after a re-plan) joins its
	// zone's block, in a run of its own.
	moved := append(slices.Delete(slices.Clone(nodes), 5, 6), nodes[5])
	m, _, _ = buildFleet("big", moved, fleetQuery{Page: 1}, t0)
	if len(m.Blocks) != 4 || m.Blocks[1].Nodes != 19 || len(m.Blocks[1].Waves) != 6 || m.Blocks[1].Waves[5].Cells[0].Name != nodes[5].Name || m.Blocks[3].Nodes != 20 {
		t.Errorf("with %s last: %+v", nodes[5].Name, m.Blocks)
	}
	for _, tc := range []struct {
		at           int
		class, label string
	}{
		{0, "good", "node-0001: Done, wave 1"},
		{2, "muted", "Skipped, wave 3"},
		{24, "busy", "Drain, wave 7"},
		{36, "idle", "Pending, wave 7"},
		{37, "wait", "Pending, wave 7; " + notReadyReason},
		{41, "wait", "Pending, wave 8; " + kuredReason},
	} {
		c := cells[tc.at]
		if c.Class != tc.class || !strings.HasSuffix(c.Label, tc.label) || !strings.HasPrefix(c.Label, c.Name+": ") {
			t.Errorf("cell %d: %+v, want class %q and a label naming the node and ending %q", tc.at, c, tc.class, tc.label)
		}
	}
}

func TestFleetFilters(t *testing.T) {
	nodes := fleet60()
	nodes[30].State = v1alpha1.NodeFailed
	count := func(fs []fleetFilter) map[string]int {
		c := map[string]int{}
		for _, f := range fs {
			c[f.Key] = f.Count
			for _, w := range f.Whys {
				c[f.Key+"/"+w.Key] = w.Count
			}
		}
		return c
	}
	listed := func(l nodeList) []string {
		var out []string
		for _, g := range l.Groups {
			for _, r := range g.Nodes {
				out = append(out, r.Name)
			}
		}
		return out
	}
	names := func(at ...int) []string {
		var out []string
		for _, i := range at {
			out = append(out, nodes[i].Name)
		}
		return out
	}

	m, fs, l := buildFleet("big", nodes, fleetQuery{Page: 1}, t0)
	want := map[string]int{"": 60, "failed": 1, "inflight": 11, "waiting": 24, "done": 19, "skipped": 5,
		"waiting/held": 1, "waiting/blocked": 1, "waiting/notready": 1, "waiting/other": 0, "waiting/turn": 21}
	if got := count(fs); !maps.Equal(got, want) {
		t.Errorf("filter counts %v, want %v", got, want)
	}
	if len(fs) == 0 || !fs[0].On || fs[0].Href != "?" || m.Show != "" || len(listed(l)) != 60 || l.What != "every node" {
		t.Errorf("no filter: %+v, map show %q, %d listed as %q; want every node listed, the first filter (all) on", fs, m.Show, len(listed(l)), l.What)
	}

	for _, tc := range []struct {
		q    string
		what string
		want []string
	}{
		{"show=failed", "failed nodes", names(30)},
		{"show=inflight", "nodes in flight", names(24, 25, 26, 27, 28, 29, 31, 32, 33, 34, 35)},
		{"show=waiting&why=notready", "waiting nodes: NotReady", names(37)},
		{"show=waiting&why=held", "waiting nodes: held by other maintenance", names(41)},
		{"show=skipped", "skipped nodes", names(2, 6, 11, 16, 21)},
	} {
		v, _ := url.ParseQuery(tc.q)
		q, err := parseFleetQuery(v)
		if err != nil {
			t.Fatal(err)
		}
		m, fs, l := buildFleet("big", nodes, q, t0)
		if got := listed(l); !slices.Equal(got, tc.want) || l.What != tc.what {
			t.Errorf("%s lists %q as %q, want %q as %q", tc.q, got, l.What, tc.want, tc.what)
		}
		if m.Show != q.Show {
			t.Errorf("%s: the map highlights %q", tc.q, m.Show)
		}
		var on []string
		for _, f := range fs {
			if f.On {
				on = append(on, f.Href)
			}
			for _, w := range f.Whys {
				if w.On {
					on = append(on, w.Href)
				}
			}
		}
		if !slices.Equal(on, []string{"?" + tc.q}) {
			t.Errorf("%s: the filters marked on are %q", tc.q, on)
		}
	}
}

func TestFleetListPages(t *testing.T) {
	nodes := fleetRollout("big", 250).Status.Nodes
	rows := func(l nodeList) int {
		n := 0
		for _, g := range l.Groups {
			n += len(g.Nodes)
		}
		return n
	}
	for _, tc := range []struct {
		q                        fleetQuery
		rows, from, to, of, page int
		pages                    int
		prev, next, first        string
	}{
		{fleetQuery{Page: 1}, 100, 1, 100, 250, 1, 3, "", "?page=2", "node-0001"},
		{fleetQuery{Page: 3}, 50, 201, 250, 250, 3, 3, "?page=2", "", nodes[200].Name},
		{fleetQuery{Page: 9}, 50, 201, 250, 250, 3, 3, "?page=2", "", nodes[200].Name}, // past the end: the last page
		{fleetQuery{Show: showWaiting, Page: 1}, 100, 1, 100, 138, 1, 2, "", "?page=2&show=waiting", nodes[112].Name},
		{fleetQuery{Show: showWaiting, Page: 2}, 38, 101, 138, 138, 2, 2, "?show=waiting", "", nodes[212].Name},
		{fleetQuery{Show: showFailed, Page: 1}, 0, 0, 0, 0, 1, 1, "", "", ""},
	} {
		_, _, l := buildFleet("big", nodes, tc.q, t0)
		first := ""
		if len(l.Groups) > 0 {
			first = l.Groups[0].Nodes[0].Name
		}
		if rows(l) != tc.rows || l.From != tc.from || l.To != tc.to || l.Of != tc.of || l.Page != tc.page || l.Pages != tc.pages ||
			l.Prev != tc.prev || l.Next != tc.next || first != tc.first {
			t.Errorf("%+v: %d rows, %d–%d of %d, page %d of %d, prev %q next %q, first %q; want %d rows, %d–%d of %d, page %d of %d, prev %q next %q, first %q",
				tc.q, rows(l), l.From, l.To, l.Of, l.Page, l.Pages, l.Prev, l.Next, first, tc.rows, tc.from, tc.to, tc.of, tc.page, tc.pages, tc.prev, tc.next, tc.first)
		}
	}
}

func TestParseFleetQuery(t *testing.T) {
	for q, want := range map[string]string{
		"show=broken":          "show=broken is not one of failed, inflight, waiting, done, skipped",
		"show=failed&why=held": "why=held goes with show=waiting",
		"show=waiting&why=x":   "why=x goes with show=waiting and is one of held, blocked, notready, other, turn",
		"page=0":               "page=0 is not a page number",
		"page=two":             "page=two is not a page number",
	} {
		v, _ := url.ParseQuery(q)
		if _, err := parseFleetQuery(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", q, err, want)
		}
	}
	v, _ := url.ParseQuery("show=waiting&why=notready&page=3&token=abc")
	if q, err := parseFleetQuery(v); err != nil || q != (fleetQuery{showWaiting, whyNotReady, 3}) || q.href() != "?page=3&show=waiting&why=notready" {
		t.Errorf("%+v (%v), href %q", q, err, q.href())
	}
}

// TestRolloutPageServesTheMapFiltersAndPages: the page as served, without
// a script: every node's cell, the filters as links with their counts, one
// page of the list, the next page and a filter by their query alone.
func TestRolloutPageServesTheMapFiltersAndPages(t *testing.T) {
	e := newEnv(t, false, fleetRollout("big", 250))
	cells := func(page string) int { return strings.Count(page, `<a href="big/nodes/`) }
	rows := func(page string) int { return strings.Count(page, `<tr id="node-`) }

	code, page := e.get("/rollouts/big")
	if code != http.StatusOK || cells(page) != 250 || rows(page) != 100 {
		t.Fatalf("GET /rollouts/big: %d, %d cells and %d rows; want 200, 250 cells and 100 rows", code, cells(page), rows(page))
	}
	wantIn(t, page, `<a href="big/nodes/node-0001" class="good" aria-label="node-0001: Done, wave 1"></a>`,
		`Canary <small>1 node, wave 1</small>`, `zone-a <small>83 nodes, waves 2–`,
		`<a href="?" class="on" aria-current="page">All <b>250</b></a>`, `<a href="?show=inflight"><i class="swatch busy"></i>In flight <b>12</b></a>`,
		`<a href="?show=waiting&amp;why=notready"><i class="swatch wait"></i>NotReady <b>1</b></a>`,
		"Nodes 1–100 of 250", `<a href="?page=2" rel="next">next ›</a>`, `href="#list"`)

	_, page = e.get("/rollouts/big?page=3")
	if cells(page) != 250 || rows(page) != 50 || !strings.Contains(page, "Nodes 201–250 of 250") || !strings.Contains(page, `<a href="?page=2" rel="prev">`) {
		t.Errorf("page 3: %d cells, %d rows; want 250 and the last 50 with a link back", cells(page), rows(page))
	}
	_, page = e.get("/rollouts/big?show=inflight")
	if cells(page) != 250 || rows(page) != 12 || !strings.Contains(page, `data-show="inflight"`) ||
		!strings.Contains(page, `<a href="?show=inflight" class="on" aria-current="page">`) || strings.Contains(page, `rel="next"`) {
		t.Errorf("show=inflight: %d cells, %d rows; want 250 cells (the in-flight ones standing out), 12 rows, the filter marked", cells(page), rows(page))
	}
	code, page = e.get("/rollouts/big?show=broken")
	if code != http.StatusBadRequest || !strings.Contains(page, "show=broken is not one of failed, inflight, waiting, done, skipped") {
		t.Errorf("show=broken: %d %.300s", code, page)
	}
}

// TestWaitWhyReadsTheOrchestratorsReasons: the reasons the orchestrator's
// own code writes on a waiting node's entry are read as the filter names
// them: a blocking pod (planner.BlockingPods), another NodeRollout's step
// (nodestep), and the fixture's NotReady and Kured reasons.
func TestWaitWhyReadsTheOrchestratorsReasons(t *testing.T) {
	pending := v1alpha1.NodeStatus{State: v1alpha1.NodePending}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "batch-1", Labels: map[string]string{"app": "batch"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
	blocked := planner.BlockingPods([]*corev1.Pod{pod}, labels.SelectorFromSet(labels.Set{"app": "batch"}))["n1"]
	other := nodestep.Record{Rollout: "other", RolloutUID: "u-other", Step: v1alpha1.NodeDrain}.HeldByAnother("u-me", func(string, types.UID) bool { return true })
	for reason, want := range map[string]string{
		planner.HeldReason(pending, blocked): whyBlocked,
		planner.HeldReason(pending, other):   whyHeld,
		notReadyReason:                       whyNotReady,
		kuredReason:                          whyHeld,
		"":                                   whyTurn,
		"retried by alice":                   whyOther,
	} {
		if got := waitWhy(reason); got != want {
			t.Errorf("waitWhy(%q) = %q, want %q", reason, got, want)
		}
	}
}
