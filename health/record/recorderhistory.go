package record

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/health/wire"
)

// Backfill tracks node and adds to its samples the snapshots its agent kept
// over the last span (HistorySource, the agent's /v1/history), so a baseline
// window that began before the Recorder tracked the node is covered
// without waiting for it. The snapshots are placed on the orchestrator's
// clock by the answer's own time: as taken when the agent's clock agrees
// within the skew tolerance, else shifted by the offset measured on the
// answer. A source without history, or an agent that serves none (an older
// one), backfills nothing and is no error: the baseline is then waited out.
// It returns how many samples it added.
func (r *Recorder) Backfill(ctx context.Context, node string, span time.Duration) (int, error) {
	hs, ok := r.cfg.Source.(HistorySource)
	if !ok {
		return 0, nil
	}
	sent := r.cfg.Now()
	// A little earlier than the span: the agent filters by its own clock.
	h, err := hs.History(ctx, node, sent.Add(-span-r.cfg.SkewTolerance-r.cfg.Every))
	received := r.cfg.Now()
	if errors.Is(err, wire.ErrNoHistory) {
		r.cfg.Logger.Debug("node agent keeps no history: the baseline is waited out", zap.String("node", node), zap.Error(err))
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	mid := sent.Add(received.Sub(sent) / 2)
	offset := h.Now.Sub(mid)
	tol := r.cfg.SkewTolerance
	var shift time.Duration
	if h.Now.Before(sent.Add(-tol)) || h.Now.After(received.Add(tol)) {
		shift = offset
	}
	var list []sample
	for _, s := range h.Snapshots {
		at := s.Time.Add(-shift)
		if at.After(sent) {
			continue // not taken before the request, by this clock: not history
		}
		list = append(list, sample{snap: s, sent: at, received: at, at: at, shift: s.Time.Sub(at), offset: offset, skewed: shift != 0, history: true})
	}
	before := r.count(node)
	r.merge(node, list)
	return r.count(node) - before, nil
}

func (r *Recorder) count(node string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.tracked[node]; ok {
		return len(h.samples)
	}
	return 0
}

// CoveredSince is the placed time of the oldest sample the Recorder holds
// of node in its agent's current run (the newest sample's epoch): a
// baseline window starting at or after it needs no wait. Zero when the
// node has no sample.
func (r *Recorder) CoveredSince(node string) time.Time {
	list, _, _ := r.samples(node)
	if len(list) == 0 {
		return time.Time{}
	}
	last := list[len(list)-1]
	oldest := last.at
	for i := len(list) - 1; i >= 0 && sameEpoch(list[i].snap, last.snap); i-- {
		oldest = list[i].at
	}
	return oldest
}

// BaselineNote says, for a verdict, when the agent restarted inside the
// baseline window [baselineStart, swapStart]: its counters were reset, so
// the samples before the restart are left out and the baseline is the
// shorter part since, whether or not the Recorder held samples of the
// run before. "" when it did not.
func (r *Recorder) BaselineNote(node string, baselineStart, swapStart time.Time) string {
	list, _, _ := r.samples(node)
	kept, dropped := lastEpoch(list, baselineStart, swapStart)
	if len(kept) == 0 {
		return ""
	}
	// The run's start on the orchestrator's clock: inside the window, the
	// baseline is shorter whether or not the older run's samples were held.
	last := kept[len(kept)-1]
	if runStart := last.snap.StartTime.Add(-last.shift); dropped == 0 && !runStart.After(baselineStart) {
		return ""
	}
	covered := time.Duration(0)
	if len(kept) > 1 {
		covered = kept[len(kept)-1].at.Sub(kept[0].at)
	}
	return fmt.Sprintf("agent on node %s restarted inside the baseline window (its counters started again at %s; %d earlier samples left out): judged on the shorter baseline of %s (%d samples) of the %s window",
		node, kept[0].snap.StartTime.UTC().Format(time.RFC3339), dropped, covered.Round(time.Second), len(kept), swapStart.Sub(baselineStart).Round(time.Second))
}

// lastEpoch is the samples surely read in [baselineStart, swapStart] that
// belong to the agent run of the last of them, and how many of the others
// it left out: two runs' counters cannot be subtracted, so a restart
// inside the window shortens the baseline.
func lastEpoch(list []sample, baselineStart, swapStart time.Time) (kept []sample, dropped int) {
	var in []sample
	for _, s := range list {
		if s.inBaseline(baselineStart, swapStart) {
			in = append(in, s)
		}
	}
	if len(in) == 0 {
		return nil, 0
	}
	last := in[len(in)-1].snap
	i := len(in)
	for i > 0 && sameEpoch(in[i-1].snap, last) {
		i--
	}
	return in[i:], i
}

// BaselineSource says, for a verdict, where the node's baseline window
// [baselineStart, swapStart] came from: read back from its agent's history
// at the slot's start (how much of the window, and the part after it
// sampled live), or waited out and sampled live because the history held
// none of it (an agent that keeps none or failed to serve it, a new agent).
// "" when the window holds no sample of the node.
func (r *Recorder) BaselineSource(node string, baselineStart, swapStart time.Time) string {
	list, _, _ := r.samples(node)
	kept, _ := lastEpoch(list, baselineStart, swapStart)
	if len(kept) == 0 {
		return ""
	}
	window := swapStart.Sub(baselineStart).Round(time.Second)
	var read []sample
	for _, s := range kept {
		if s.history {
			read = append(read, s)
		}
	}
	if len(read) == 0 {
		return fmt.Sprintf("baseline of node %s waited out: %s of the %s window sampled live (%d samples), none read from its agent's history",
			node, kept[len(kept)-1].at.Sub(kept[0].at).Round(time.Second), window, len(kept))
	}
	last := read[len(read)-1].at
	return fmt.Sprintf("baseline of node %s from its agent's history: %s of the %s window read back at the slot's start (%d snapshots), the last %s sampled live (%d sampled)",
		node, last.Sub(kept[0].at).Round(time.Second), window, len(read), swapStart.Sub(last).Round(time.Second), len(kept)-len(read))
}

// HistorySource reads the snapshots a node's agent kept since a time.
// remote.Agent implements it.
type HistorySource interface {
	History(ctx context.Context, node string, since time.Time) (wire.History, error)
}
