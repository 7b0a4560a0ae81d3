package dashboard

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// section is the page's plots section.
func section(t *testing.T, page string) string {
	t.Helper()
	i, j := strings.Index(page, `<section class="plots"`), strings.Index(page, "<h2>The judge's evidence</h2>")
	if i < 0 || j < i {
		t.Fatalf("the node page has no plots section before the evidence:\n%s", page)
	}
	return page[i:j]
}

// TestNodePagePlotsTheJudgedWindows: a judged node's page draws, for each
// judged family, the node's pods, its control nodes pooled and the probe,
// over the baseline and over the soak, the swap marked where it started,
// with words for what each shows; the agents' history, final once it
// reaches the soak's end, is read once for any number of loads.
func TestNodePagePlotsTheJudgedWindows(t *testing.T) {
	hist := haltedHistory()
	e := newEnvWith(t, func(c *Config) { c.History = hist }, haltedRollout("faulty", 9))
	_, page := e.get("/rollouts/faulty/nodes/node-001")
	plots := section(t, page)
	wantIn(t, plots, "<h2 id=\"plots-heading\">Over time</h2>", "against its control nodes node-002, node-003 pooled, a mean per node (dashed, squares)",
		`data-marker="swap" data-at="2026-12-03T03:01:00Z"`, `<title id="plot-resets-title">Connection resets, sent and received (resets/s)</title>`,
		"node-001 0.2 resets/s → 4 resets/s; controls 0.2 resets/s → 0.2 resets/s; probe 0 resets/s → 0.6 resets/s",
		"node-001 0 failed connects/s → 0.2 failed connects/s", "minutes from the swap", `role="img"`)
	for _, id := range []string{"resets", "failed-connects", "connect-latency"} {
		for _, kind := range []string{seriesNode, seriesControl, seriesProbe} {
			for _, w := range []string{windowBaseline, windowSoak} {
				if want := `data-plot="` + id + `"`; !strings.Contains(plots, want) {
					t.Errorf("no %s plot", id)
				}
				if want := `data-series="` + kind + `" data-window="` + w + `" data-points="12"`; strings.Count(plots, want) != 3 {
					t.Errorf("%q is not in each of the three plots", want)
				}
			}
		}
	}
	for range 3 {
		e.get("/rollouts/faulty/nodes/node-001")
	}
	for _, n := range []string{"node-001", "node-002", "node-003"} {
		if got := hist.readsOf(n); got != 1 {
			t.Errorf("%s's agent read %d times for four loads, want once", n, got)
		}
	}
	if hist.readsOf("node-004") != 0 {
		t.Error("an agent read that is no control")
	}
}

// TestNodePagePlotsSayWhyNot: without the agents, without windows in the
// judgement or without the node's history the page says why it draws
// nothing; a control node whose agent does not answer is left out with a
// note; and plots that are not final are read again after a while.
func TestNodePagePlotsSayWhyNot(t *testing.T) {
	noWindows := haltedRollout("faulty", 3)
	noWindows.Status.Nodes[0].Judgement.BaselineFrom = ""
	for _, c := range []struct {
		name string
		hist HistorySource
		nr   *v1alpha1.NodeRollout
		want string
	}{
		{"no agents", nil, haltedRollout("faulty", 3), "This dashboard reads no node agents (it was started without their CA and token: --agent-ca and --agent-token-file)"},
		{"no windows", haltedHistory(), noWindows, "This judgement records no windows to plot"},
		{"node's agent down", &fakeHistory{}, haltedRollout("faulty", 3), "The agent of node node-001 did not give its history: dial tcp: no route to host."},
		{"history gone", &fakeHistory{hist: map[string]wire.History{"node-001": {Node: "node-001", StartTime: t0.Add(time.Hour), Now: t0.Add(2 * time.Hour), Every: historyEvery, Keep: time.Hour}}},
			haltedRollout("faulty", 3), "The agent of node node-001 keeps no interval of these windows (it keeps 1h0m0s of history, and starts it over when it restarts)."},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnvWith(t, func(cfg *Config) { cfg.History = c.hist }, c.nr)
			_, page := e.get("/rollouts/faulty/nodes/node-001")
			plots := section(t, page)
			if !strings.Contains(plots, c.want) || strings.Contains(plots, "<svg") {
				t.Errorf("plots section %q; want %q and no plot", plots, c.want)
			}
		})
	}

	now := atomic.Pointer[time.Time]{}
	at := t0.Add(5 * time.Minute)
	now.Store(&at)
	hist := haltedHistory()
	hist.errs = map[string]error{"node-003": errors.New("connection refused")}
	e := newEnvWith(t, func(c *Config) { c.History, c.Now = hist, func() time.Time { return *now.Load() } }, haltedRollout("faulty", 3))
	_, page := e.get("/rollouts/faulty/nodes/node-001")
	plots := section(t, page)
	wantIn(t, plots, "Control node node-003 is left out: its agent did not give its history (connection refused).",
		"against its control node node-002 (dashed, squares)", "control node-002 0.2 resets/s → 0.2 resets/s")
	e.get("/rollouts/faulty/nodes/node-001")
	if got := hist.readsOf("node-003"); got != 1 {
		t.Errorf("node-003 read %d times at once, want once (the plots are kept a while)", got)
	}
	later := at.Add(retryPlotsAfter + time.Second)
	now.Store(&later)
	hist.mu.Lock()
	hist.errs = nil
	hist.mu.Unlock()
	_, page = e.get("/rollouts/faulty/nodes/node-001")
	if plots := section(t, page); strings.Contains(plots, "left out") || !strings.Contains(plots, "node-002, node-003 pooled") {
		t.Errorf("after %s the plots still leave node-003 out", retryPlotsAfter)
	}
}
