package dashboard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// HistorySource is what the node page's plots need of the node agents: the
// snapshots one node's agent kept since a time (its /v1/history).
// remote.Agent implements it.
type HistorySource interface {
	History(ctx context.Context, node string, since time.Time) (wire.History, error)
}

const (
	// historyTimeout bounds the reads of one page's histories, all at once.
	historyTimeout = 10 * time.Second
	// historyMargin is read before the baseline and kept past the soak, for
	// the agents' clocks and the interval that straddles each end.
	historyMargin = time.Minute
	// retryPlotsAfter is how long plots that are not final yet (a history
	// that does not reach the soak's end, an agent that did not answer)
	// are served before the agents are read again.
	retryPlotsAfter = 30 * time.Second
	// plotCacheSize bounds the plots kept: a few dozen nodes' pages.
	plotCacheSize = 64
	// defaultProbeNamespace is the probe's (health.DefaultProbeNamespace),
	// for a judgement without a probe row to name it.
	defaultProbeNamespace = "nodewise-probe"
)

// plotsView is the node page's plots of its judged windows, or why there
// are none.
type plotsView struct {
	Plots    []plotView
	Node     string
	Controls []string
	// Notes say what the plots lack and why (a control node's agent that
	// did not answer, a history that starts after the baseline).
	Notes []string
	// Missing says why there are no plots ("" when there are).
	Missing string
}

// plotKey names one judgement's plots.
type plotKey struct{ rollout, node, judgedAt, baselineFrom string }

type cachedPlots struct {
	view    *plotsView
	expires time.Time // zero: final
}

// plotCache keeps the plots of the judgements shown lately: the windows are
// in the past, so once every agent's history reaches the soak's end the
// plots are final and the page's live refreshes read no agent again.
type plotCache struct {
	mu    sync.Mutex
	order []plotKey
	byKey map[plotKey]cachedPlots
}

func (c *plotCache) get(k plotKey, now time.Time) (*plotsView, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[k]
	if !ok || (!e.expires.IsZero() && now.After(e.expires)) {
		return nil, false
	}
	return e.view, true
}

func (c *plotCache) put(k plotKey, v *plotsView, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[plotKey]cachedPlots{}
	}
	if _, ok := c.byKey[k]; !ok {
		c.order = append(c.order, k)
	}
	c.byKey[k] = cachedPlots{v, expires}
	for len(c.order) > plotCacheSize {
		delete(c.byKey, c.order[0])
		c.order = c.order[1:]
	}
}

// spanOf is a judgement's windows, false when it records none.
func spanOf(j *v1alpha1.NodeJudgement) (judgedSpan, bool) {
	var s judgedSpan
	for _, f := range []struct {
		text string
		to   *time.Time
	}{{j.BaselineFrom, &s.BaselineFrom}, {j.SwapAt, &s.SwapAt}, {j.SoakFrom, &s.SoakFrom}, {j.JudgedAt, &s.SoakTo}} {
		t, err := time.Parse(time.RFC3339, f.text)
		if err != nil {
			return judgedSpan{}, false
		}
		*f.to = t
	}
	return s, s.BaselineFrom.Before(s.SwapAt) && !s.SoakFrom.Before(s.SwapAt) && s.SoakFrom.Before(s.SoakTo)
}

// probeNamespace is the probe's namespace as the judgement's probe rows
// name it.
func probeNamespace(j *v1alpha1.NodeJudgement) string {
	for _, r := range j.Rows {
		if r.Values != nil && r.Values.Probe {
			if ns, _, ok := strings.Cut(r.Pod, "/"); ok {
				return ns
			}
		}
	}
	return defaultProbeNamespace
}

// nodePlots are a judged node's plots, from the cache or read from the agents.
func (s *Server) nodePlots(ctx context.Context, rollout string, n *v1alpha1.NodeStatus) *plotsView {
	j := n.Judgement
	if j == nil {
		return nil
	}
	span, ok := spanOf(j)
	if !ok {
		return &plotsView{Missing: "This judgement records no windows to plot (a gate that judges none, or an orchestrator older than the plots): its tables below are the evidence."}
	}
	if s.cfg.History == nil {
		return &plotsView{Missing: "This dashboard reads no node agents (it was started without their CA and token: --agent-ca and --agent-token-file), so it cannot plot their history: the tables below are the evidence."}
	}
	key := plotKey{rollout, n.Name, j.JudgedAt, j.BaselineFrom}
	now := s.cfg.Now()
	if v, ok := s.plots.get(key, now); ok {
		return v
	}
	v, final := s.readPlots(ctx, span, n.Name, j.ControlNodes, probeNamespace(j))
	if ctx.Err() != nil {
		return v // the request went away: what it read is no answer for the next one
	}
	expires := time.Time{}
	if !final {
		expires = now.Add(retryPlotsAfter)
	}
	s.plots.put(key, v, expires)
	return v
}

// readPlots reads the node's and its control nodes' histories at once and
// lays out the plots; final says every history reached the soak's end.
func (s *Server) readPlots(ctx context.Context, span judgedSpan, node string, controls []string, probeNS string) (*plotsView, bool) {
	ctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	nodes := append([]string{node}, controls...)
	hs := make([]agentHistory, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, name := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hs[i], errs[i] = s.history(ctx, name, span)
		}()
	}
	wg.Wait()
	v := &plotsView{Node: node}
	if errs[0] != nil {
		v.Missing = fmt.Sprintf("The agent of node %s did not give its history: %v. The tables below are the evidence.", node, errs[0])
		return v, false
	}
	if len(hs[0].Snaps) < 2 {
		v.Missing = fmt.Sprintf("The agent of node %s keeps no interval of these windows (it keeps %s of history, and starts it over when it restarts). The tables below are the evidence.", node, hs[0].Keep)
		return v, reaches(hs[0], span.SoakTo)
	}
	final := reaches(hs[0], span.SoakTo)
	v.Notes = append(v.Notes, coverage(hs[0], span)...)
	var ctrl []agentHistory
	for i, c := range controls {
		if err := errs[i+1]; err != nil {
			v.Notes = append(v.Notes, fmt.Sprintf("Control node %s is left out: its agent did not give its history (%v).", c, err))
			final = false
			continue
		}
		final = final && reaches(hs[i+1], span.SoakTo)
		ctrl = append(ctrl, hs[i+1])
		v.Controls = append(v.Controls, c)
	}
	for _, c := range buildCharts(span, hs[0], ctrl, probeNS) {
		v.Plots = append(v.Plots, layoutPlot(c, span))
	}
	return v, final
}

// history reads one node's history from before the baseline, placed on the
// dashboard's clock by the answer's own time, and keeps the snapshots
// between the windows' margins.
func (s *Server) history(ctx context.Context, node string, span judgedSpan) (agentHistory, error) {
	sent := s.cfg.Now()
	h, err := s.cfg.History.History(ctx, node, span.BaselineFrom.Add(-historyMargin))
	received := s.cfg.Now()
	if err != nil {
		return agentHistory{}, err
	}
	out := agentHistory{Node: node, Shift: sent.Add(received.Sub(sent) / 2).Sub(h.Now), Every: h.Every, Keep: h.Keep}
	for _, snap := range h.Snapshots {
		at := snap.Time.Add(out.Shift)
		if !at.Before(span.BaselineFrom.Add(-historyMargin)) && !at.After(span.SoakTo.Add(historyMargin)) {
			out.Snaps = append(out.Snaps, snap)
		}
	}
	return out, nil
}

// reaches says h holds a snapshot at or after t.
func reaches(h agentHistory, t time.Time) bool {
	n := len(h.Snaps)
	return n > 0 && !h.Snaps[n-1].Time.Add(h.Shift).Before(t)
}

// coverage notes a judged node's history that starts after the baseline.
func coverage(h agentHistory, span judgedSpan) []string {
	var out []string
	if first := h.Snaps[0].Time.Add(h.Shift); first.After(span.BaselineFrom.Add(h.Every)) {
		out = append(out, fmt.Sprintf("The agent of node %s keeps its history from %s, after the baseline began (it keeps %s, and starts over when it restarts).",
			h.Node, first.UTC().Format(time.RFC3339), h.Keep))
	}
	return out
}
