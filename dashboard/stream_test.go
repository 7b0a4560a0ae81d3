package dashboard

import (
	"bufio"
	"encoding/json"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// openStream serves path and opens the event stream its page names.
func (e *env) openStream(path string) *bufio.Reader {
	e.t.Helper()
	_, page := e.get(path)
	m := regexp.MustCompile(`data-stream="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		e.t.Fatalf("%s names no event stream of its own", path)
	}
	return e.events("/events?stream=" + m[1])
}

func (e *env) events(path string) *bufio.Reader {
	e.t.Helper()
	resp, err := e.client.Get(e.srv.URL + path)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		e.t.Fatalf("GET %s: %s, %s", path, resp.Status, resp.Header.Get("Content-Type"))
	}
	return bufio.NewReader(resp.Body)
}

type sentPatch struct {
	Parts map[string]string `json:"parts"`
	Cells [][3]string       `json:"cells"`
	Rows  [][2]string       `json:"rows"`
}

func readPatch(t *testing.T, r *bufio.Reader) sentPatch {
	t.Helper()
	event, data := readSSE(t, r)
	var p sentPatch
	if event != "patch" {
		t.Fatalf("event %q (%.200s), want a patch", event, data)
	}
	if err := json.Unmarshal([]byte(data), &p); err != nil {
		t.Fatalf("patch %.200s: %v", data, err)
	}
	return p
}

func (p sentPatch) rowNames() []string {
	var out []string
	for _, r := range p.Rows {
		out = append(out, r[0])
	}
	return out
}

// TestStreamSendsOnlyWhatChanged: a rollout page's own event stream sends,
// for one node's change, that node's cell, its row when the page lists it,
// and the sections whose text changed (the counts), not the page; a change
// to another rollout sends nothing; a list whose members change is sent
// whole (one page of it); a stream the server does not know asks the page
// to load itself again.
func TestStreamSendsOnlyWhatChanged(t *testing.T) {
	nr := fleetRollout("big", 250)
	e := newEnv(t, false, nr)
	stream := e.openStream("/rollouts/big")
	filtered := e.openStream("/rollouts/big?show=inflight")
	change := func(at int, st v1alpha1.NodeState) string {
		nr.Status.Nodes[at].State = st
		nr.Status.Counts = planner.Counts(nr.Status.Nodes)
		e.rs.put(nr)
		return nr.Status.Nodes[at].Name
	}

	e.rs.put(fleetRollout("other", 60))
	deep := change(150, v1alpha1.NodeSoak) // pending, on the list's second page
	p := readPatch(t, stream)
	if want := [][3]string{{deep, "busy", deep + ": Soak, wave " + waveOf(nr, 150)}}; !slices.Equal(p.Cells, want) {
		t.Errorf("cells %q, want %q", p.Cells, want)
	}
	if len(p.Rows) != 0 || !slices.Equal(slices.Sorted(maps.Keys(p.Parts)), []string{"filters", "summary"}) {
		t.Errorf("rows %q and parts %q; want no row (%s is not listed) and the summary and filters", p.rowNames(), slices.Sorted(maps.Keys(p.Parts)), deep)
	}
	if !strings.Contains(p.Parts["summary"], "13 in flight") || !strings.Contains(p.Parts["filters"], "In flight <b>13</b>") {
		t.Errorf("summary %q, filters %q: want 13 in flight", p.Parts["summary"], p.Parts["filters"])
	}
	// The in-flight list gained a member: its page is sent whole.
	p = readPatch(t, filtered)
	if len(p.Cells) != 1 || !strings.Contains(p.Parts["list"], `<tr id="node-`+deep+`"`) || strings.Count(p.Parts["list"], `<tr id="node-`) != 13 {
		t.Errorf("the in-flight page: cells %q, list %.300q; want the one cell and the list of 13", p.Cells, p.Parts["list"])
	}

	listed := change(5, v1alpha1.NodeFailed) // done, on the first page
	p = readPatch(t, stream)
	if len(p.Cells) != 1 || p.Cells[0][0] != listed || p.Cells[0][1] != "bad" {
		t.Errorf("cells %q, want %s's alone, failed", p.Cells, listed)
	}
	if !slices.Equal(p.rowNames(), []string{listed}) || !strings.HasPrefix(p.Rows[0][1], `<tr id="node-`+listed+`" class="bad">`) {
		t.Errorf("rows %q, want %s's, failed", p.Rows, listed)
	}
	if _, ok := p.Parts["list"]; ok {
		t.Error("the whole list was sent for a change of one of its rows")
	}
	// Not a member of the in-flight list: its cell alone.
	if p = readPatch(t, filtered); len(p.Cells) != 1 || len(p.Rows) != 0 || p.Parts["list"] != "" {
		t.Errorf("the in-flight page: cells %q, rows %q, list sent %t", p.Cells, p.rowNames(), p.Parts["list"] != "")
	}

	if event, _ := readSSE(t, e.events("/events?stream=unknown")); event != "resync" {
		t.Errorf("a stream the server does not know: %q, want resync", event)
	}
}

func waveOf(nr *v1alpha1.NodeRollout, at int) string {
	return strconv.Itoa(int(nr.Status.Nodes[at].Wave))
}

// TestTabsForgetPagesWhoseStreamNeverCame: pages whose script never opens
// their stream (curl, a tab closed at once) are kept at most maxUnclaimed
// at once, the oldest forgotten first, and at most unclaimedFor; a claimed
// tab stays until its stream ends, and is claimed once.
func TestTabsForgetPagesWhoseStreamNeverCame(t *testing.T) {
	h := &hub{subs: map[*subscription]struct{}{}}
	var ts tabs
	at := time.Now()
	var ids []string
	for i := range maxUnclaimed + 6 {
		ids = append(ids, ts.add(&tab{sub: h.subscribe(), served: at.Add(time.Duration(i) * time.Millisecond)}))
	}
	if len(ts.open) != maxUnclaimed || len(h.subs) != maxUnclaimed {
		t.Errorf("%d tabs and %d subscriptions kept, want %d", len(ts.open), len(h.subs), maxUnclaimed)
	}
	if ts.claim(ids[5]) != nil || ts.claim(ids[6]) == nil || ts.claim(ids[6]) != nil {
		t.Error("want the six oldest forgotten and the seventh claimed, once")
	}
	ts.add(&tab{sub: h.subscribe(), served: at.Add(unclaimedFor + time.Second)})
	if len(ts.open) != 2 || len(h.subs) != 2 {
		t.Errorf("a minute on: %d tabs and %d subscriptions, want the claimed one and the new one", len(ts.open), len(h.subs))
	}
	ts.close(ids[6])
	if len(ts.open) != 1 || len(h.subs) != 1 {
		t.Errorf("after the stream ends: %d tabs, %d subscriptions", len(ts.open), len(h.subs))
	}
}

// TestOneChangeAt5000NodesSendsUnder10KiB holds the bar make bench-dashboard
// measures: at 5,000 nodes one node's state change sends an open rollout
// page less than 10 KiB, whether the node is listed on the tab's page or not.
func TestOneChangeAt5000NodesSendsUnder10KiB(t *testing.T) {
	nr := fleetRollout("huge", 5000)
	e := newEnv(t, false, nr)
	stream := e.openStream("/rollouts/huge")
	for _, at := range []int{4000, 2} { // off the list's first page, then on it
		nr.Status.Nodes[at].State = v1alpha1.NodeSwapZtunnel
		nr.Status.Counts = planner.Counts(nr.Status.Nodes)
		e.rs.put(nr)
		event, data := readSSE(t, stream)
		if event != "patch" || len(data) >= 10<<10 {
			t.Errorf("node %d's change: %s event of %d bytes, want a patch under 10 KiB", at, event, len(data))
		}
	}
}
