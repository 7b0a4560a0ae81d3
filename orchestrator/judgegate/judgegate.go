// Package judgegate plugs the judge (package health) into the orchestrator's
// soak step: it implements gate.Gate over a health.Judge, a
// record.Recorder that keeps each node's snapshots, and NodeRollout
// spec.gates. cmd/orchestrator builds one and sets orchestrator.Config.Gate.
package judgegate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/gatespec"
	"github.com/nodewise/nodewise/health/record"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/gate"
)

// Config configures a Gate.
type Config struct {
	// Judge is required. Build it with the Recorder as its Source
	// (health.JudgeConfig.Source), so the current snapshots it reads are on
	// the orchestrator's clock like the windows' (Build does).
	Judge    *health.Judge
	Recorder *record.Recorder // required; run its Run loop alongside the orchestrator
	// GateAddresses are the hosts spec.gates.prometheus may query (default:
	// the cluster's Services only). A refused address fails the node with
	// its reason, and no request is sent.
	GateAddresses remote.AddressPolicy
	Logger        *zap.Logger
	// Sleep waits between judgements (default: a timer that honours ctx).
	Sleep func(ctx context.Context, d time.Duration) error
}

// Gate implements gate.Gate: the judge over the node agents.
type Gate struct {
	cfg Config

	mu sync.Mutex
	// holds maps each prepared node to the nodes the Recorder samples for
	// it: itself and its control nodes. A node is tracked while any entry
	// holds it, so releasing one judged node never drops a control another
	// one still needs.
	holds map[string]map[string]bool
	// alertClients are spec.blocking.alerts' Prometheus clients by address
	// (alerts.go), kept so each server's connections are reused.
	alertClients map[string]*remote.Prometheus
	// restored is what restore and restoreControls took back from each
	// judged node's persisted records in this process, so that every later
	// look and judgement of the node (its samples now in the Recorder) still
	// says where its baseline and its controls came from.
	restored map[string]restoredFrom
}

// restoredFrom is a node's records taken back for its swap at swap.
type restoredFrom struct {
	swap     time.Time
	baseline *record.Baseline
	controls string // the reason restoreControls gave
}

var _ gate.Gate = (*Gate)(nil)

// New validates cfg.
func New(cfg Config) (*Gate, error) {
	if cfg.Judge == nil || cfg.Recorder == nil {
		return nil, errors.New("judgegate.Config: Judge and Recorder are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Sleep == nil {
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}
	}
	return &Gate{cfg: cfg, holds: map[string]map[string]bool{}, restored: map[string]restoredFrom{}}, nil
}

// Reads implements gate.Gate: the judge samples the agents from preflight
// on, reads their history and their enrollment checks.
func (g *Gate) Reads() gate.Reads {
	return gate.Reads{Samples: true, History: true, Enrollment: true}
}

// Prepare starts recording a node's snapshots, and its control nodes'; the
// orchestrator calls it when the node enters preflight, before its baseline
// window, and again after a restart (holding a node twice holds it once). It
// fails when the node's agent does not answer, so a node without a working
// agent is never touched. A control node whose agent does not answer is
// tracked all the same (the Recorder retries each period) and left out of
// the judgement if its windows are missing then.
func (g *Gate) Prepare(ctx context.Context, in gate.PrepareInput) error {
	g.mu.Lock()
	h := g.holds[in.Node]
	if h == nil {
		h = map[string]bool{}
		g.holds[in.Node] = h
	}
	h[in.Node] = true
	for _, c := range in.Control {
		h[c] = true
	}
	g.mu.Unlock()
	if err := g.cfg.Recorder.Track(ctx, in.Node); err != nil {
		return fmt.Errorf("preflight: node agent on %s: %w", in.Node, err)
	}
	g.backfill(ctx, in.Node, in.Baseline)
	for _, c := range in.Control {
		if err := g.cfg.Recorder.Track(ctx, c); err != nil {
			g.cfg.Logger.Info("control node's agent does not answer yet; sampling it from now on", zap.String("node", in.Node), zap.String("control", c), zap.Error(err))
			continue
		}
		g.backfill(ctx, c, in.Baseline) // the controls' "before" is the same window
	}
	return nil
}

// backfill takes the last baseline of the node's agent history back into
// the Recorder (record.Recorder.Backfill). An agent that keeps none, or
// fails to serve it, leaves the baseline to be waited out: logged, no error.
func (g *Gate) backfill(ctx context.Context, node string, baseline time.Duration) {
	if baseline <= 0 {
		return
	}
	n, err := g.cfg.Recorder.Backfill(ctx, node, baseline)
	if err != nil {
		g.cfg.Logger.Info("node agent's history unavailable: its baseline is waited out", zap.String("node", node), zap.Error(err))
		return
	}
	g.cfg.Logger.Debug("baseline taken from the agent's history", zap.String("node", node), zap.Int("samples", n),
		zap.Time("coveredSince", g.cfg.Recorder.CoveredSince(node)))
}

// CoveredSince implements gate.Gate: the node sampled now,
// the oldest sample the Recorder holds of its agent's current run. A
// sample that fails keeps what the Recorder holds (the gate reports a
// silent agent when it judges).
func (g *Gate) CoveredSince(ctx context.Context, node string) time.Time {
	if err := g.cfg.Recorder.Sample(ctx, node); err != nil {
		g.cfg.Logger.Info("cannot sample node agent", zap.String("node", node), zap.Error(err))
	}
	return g.cfg.Recorder.CoveredSince(node)
}

// Enrollment implements gate.Gate: the enrollment of the last baseline
// sample the Recorder holds that carries one (a successor leader's Recorder
// takes the baseline back from record first, as Judge does; nil when none
// carries one), and the node's enrollment in a sample taken now.
func (g *Gate) Enrollment(ctx context.Context, node string, baselineStart, swapStart time.Time, record string) (before, now *wire.Enrollment, err error) {
	if _, err := g.restore(node, baselineStart, swapStart, record); err != nil {
		return nil, nil, err
	}
	s, err := g.cfg.Recorder.Snapshot(ctx, node)
	if err != nil {
		return nil, nil, fmt.Errorf("agent on node %s did not answer: %w", node, err)
	}
	baseline, _, _ := g.cfg.Recorder.Windows(node, baselineStart, swapStart, swapStart)
	return health.EnrollmentBefore(baseline), s.Enrollment, nil
}

// Done forgets a node's snapshots once its gate has passed or failed, and
// its control nodes' unless another prepared node still holds them.
func (g *Gate) Done(node string) {
	g.mu.Lock()
	released := g.holds[node]
	if released == nil {
		released = map[string]bool{node: true} // prepared by a predecessor process, or never
	}
	delete(g.holds, node)
	delete(g.restored, node)
	// Untrack under g.mu: a Prepare that holds n again either came first
	// (n stays) or tracks it again after.
	defer g.mu.Unlock()
	for n := range released {
		held := false
		for _, h := range g.holds {
			held = held || h[n]
		}
		if !held {
			g.cfg.Recorder.Untrack(n)
		}
	}
}

// controls are the control nodes' samples over the judged node's intervals,
// for health.Input.Control. A control without them (never tracked, or its
// agent silent through the baseline) is left out, with a reason: losing a
// control only makes the judgement stricter.
func (g *Gate) controls(ctx context.Context, in gate.GateInput) ([]health.ControlNode, []string) {
	var out []health.ControlNode
	var dropped []string
	for _, c := range in.Control {
		// A fresh sample, as for the judged node; one that fails is the
		// judge's to report (it reads each control's current snapshot).
		_ = g.cfg.Recorder.Sample(ctx, c)
		baseline, soakStart, err := g.cfg.Recorder.Windows(c, in.BaselineStart, in.SwapStart, in.SoakStart)
		if errors.Is(err, record.ErrNotTracked) {
			dropped = append(dropped, fmt.Sprintf("control node %s left out: not sampled by this process over the baseline, and not in the control group's persisted record (named since the preflight, or trimmed from the record)", c))
			continue
		}
		if err != nil {
			dropped = append(dropped, fmt.Sprintf("control node %s left out: %v", c, err))
			continue
		}
		out = append(out, health.ControlNode{Node: c, Baseline: baseline, SoakStart: soakStart})
	}
	return out, dropped
}

// stampWindows records in a judgement the intervals it compared and the
// control nodes it compared with.
func stampWindows(j *v1alpha1.NodeJudgement, in gate.GateInput, control []health.ControlNode) {
	j.BaselineFrom, j.SwapAt, j.SoakFrom = rfc3339(in.BaselineStart), rfc3339(in.SwapStart), rfc3339(in.SoakStart)
	j.ControlNodes = nil
	for _, c := range control[:min(len(control), v1alpha1.MaxJudgedControls)] {
		j.ControlNodes = append(j.ControlNodes, c.Node)
	}
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// clockReasons say, for the judged node and each control, how far its
// agent's clock was off the orchestrator's and what that changed, when it
// changed anything (samples placed on the orchestrator's clock, or answers
// whose seq did not advance), and when its agent restarted inside the
// baseline window (the baseline is the shorter part since).
func (g *Gate) clockReasons(in gate.GateInput) []string {
	var out []string
	for _, n := range append([]string{in.Node}, in.Control...) {
		if c := g.cfg.Recorder.Clock(n, in.BaselineStart, in.SwapStart, in.SoakStart); c.Mattered() {
			out = append(out, c.Reason())
		}
		if note := g.cfg.Recorder.BaselineNote(n, in.BaselineStart, in.SwapStart); note != "" {
			out = append(out, note)
		}
	}
	return out
}

// Judge implements gate.Gate. It judges the node every
// spec.gates.interval until the judge says Pass or Fail: Inconclusive (a
// failing interval short of consecutiveFailures, a gate query error short of
// its limit, or too little traffic under the Pause policy) waits and judges
// again, carrying the judge's Summary from one judgement to the next. The
// last verdict's Summary is what the orchestrator persists in status.
func (g *Gate) Judge(ctx context.Context, in gate.GateInput) (health.Verdict, error) {
	cfg, err := gatespec.Config(in.Spec)
	if err != nil {
		return health.Verdict{}, err
	}
	interval, err := gatespec.Interval(in.Spec)
	if err != nil {
		return health.Verdict{}, err
	}
	var external []health.ExternalGate
	prom, err := gatespec.Prometheus(in.Spec, g.cfg.GateAddresses, g.cfg.Logger)
	if errors.Is(err, remote.ErrAddressRefused) {
		return health.Verdict{Outcome: health.Fail, Reasons: []string{err.Error()}}, nil
	}
	if err != nil {
		return health.Verdict{}, err
	}
	if prom != nil {
		external = append(external, prom)
	}
	if !in.SwapStart.After(in.BaselineStart) {
		return health.Verdict{Outcome: health.Fail, Reasons: []string{fmt.Sprintf(
			"no baseline window: the swap started at %s, not after the baseline started at %s",
			in.SwapStart.UTC().Format(time.RFC3339), in.BaselineStart.UTC().Format(time.RFC3339))}}, nil
	}
	restored, err := g.restore(in.Node, in.BaselineStart, in.SwapStart, in.Record)
	if err != nil {
		return health.Verdict{Outcome: health.Fail, Reasons: []string{err.Error()}}, nil
	}
	if restored != nil && restored.SoakStart == nil && in.SoakStart.Before(in.Now) {
		return health.Verdict{Outcome: health.Fail, Reasons: []string{fmt.Sprintf(
			"%s, but the record holds no sample of the soak's start (%s): the soak window cannot be told, failing closed",
			restoredReason(*restored), in.SoakStart.UTC().Format(time.RFC3339))}}, nil
	}
	var controlsNote string
	if !cfg.NoControlGroup {
		controlsNote = g.restoreControls(in.Node, in.Control, in.BaselineStart, in.SwapStart, in.Controls)
	}
	// The old ztunnel's grace period, as the orchestrator persisted it: its
	// drain deadline says which connections the swap reset on purpose.
	deadline := health.DrainDeadline(in.ZtunnelGrace)
	prev := in.Previous // persisted by an earlier leader's rounds, if any
	for {
		// A fresh sample: a soak shorter than the Recorder's period still has
		// one, and an agent that stopped answering is named as such.
		if err := g.cfg.Recorder.Sample(ctx, in.Node); err != nil {
			return health.Verdict{Outcome: health.Fail, Reasons: []string{fmt.Sprintf("agent on node %s did not answer: %v", in.Node, err)}}, nil
		}
		baseline, soakStart, err := g.cfg.Recorder.Windows(in.Node, in.BaselineStart, in.SwapStart, in.SoakStart)
		if err != nil {
			return health.Verdict{Outcome: health.Fail, Reasons: []string{err.Error()}}, nil
		}
		var control []health.ControlNode
		var dropped []string
		if !cfg.NoControlGroup {
			control, dropped = g.controls(ctx, in)
		}
		v, err := g.cfg.Judge.Judge(ctx, health.Input{
			Node: in.Node, Gates: cfg, Baseline: baseline, SoakStart: soakStart,
			DrainDeadline: deadline,
			External:      external, Previous: prev,
			Control: control, ControlScope: in.ControlScope, ControlsLeftOut: len(dropped),
			Soak: in.Soak,
		})
		if err == nil {
			if restored != nil {
				v.Reasons = append(v.Reasons, restoredReason(*restored))
			} else if src := g.cfg.Recorder.BaselineSource(in.Node, in.BaselineStart, in.SwapStart); src != "" {
				v.Reasons = append(v.Reasons, src) // read from the agent's history, or waited out
			}
			if controlsNote != "" {
				v.Reasons = append(v.Reasons, controlsNote)
			}
			v.Reasons = append(v.Reasons, dropped...)
			v.Reasons = append(v.Reasons, g.clockReasons(in)...)
			if v.Summary != nil {
				stampWindows(v.Summary, in, control)
			}
		}
		if err != nil || v.Outcome != health.Inconclusive {
			if err == nil {
				g.Done(in.Node)
			}
			return v, err
		}
		prev = v.Summary
		if in.Progress != nil {
			// Persisted, so a successor goes on counting from this round.
			if err := in.Progress(ctx, v); err != nil {
				return v, fmt.Errorf("persisting the inconclusive judgement: %w", err)
			}
		}
		g.cfg.Logger.Info("judgement inconclusive, judging again", zap.String("node", in.Node),
			zap.Duration("in", interval), zap.Strings("reasons", v.Reasons))
		if err := g.cfg.Sleep(ctx, interval); err != nil {
			return v, err
		}
	}
}

// Keep implements gate.Gate: the node's baseline samples, and
// once its soak started the soak's first (sampled now), as a record of the
// pods that fit (the probe's first, then the most connected), and its
// control nodes' as a record.Controls (keepControls). A gate whose Recorder
// never saw the baseline (a successor) takes it back from in.Record (and
// in.Controls) first; a record that already holds this soak's start is
// returned as it is.
func (g *Gate) Keep(ctx context.Context, in gate.KeepInput) (gate.Kept, error) {
	cfg, err := gatespec.Config(in.Spec)
	if err != nil {
		return gate.Kept{}, err
	}
	lim := record.Limits{Keep: func(k health.PodKey) bool { return k.Namespace == cfg.ProbeNamespace }}
	node, err := g.keepNode(ctx, in, lim)
	if err != nil {
		return gate.Kept{}, err
	}
	out := gate.Kept{Baseline: node}
	if !cfg.NoControlGroup {
		out.Controls = g.keepControls(ctx, in, lim)
	}
	return out, nil
}

func (g *Gate) keepNode(ctx context.Context, in gate.KeepInput, lim record.Limits) (string, error) {
	if in.SoakStart.IsZero() {
		rec, err := g.cfg.Recorder.Record(in.Node, in.BaselineStart, in.SwapStart, time.Time{})
		if err != nil {
			return "", err
		}
		enc, _, err := record.EncodeBaseline(rec, lim)
		return enc, err
	}
	if in.Record != "" {
		if r, err := record.DecodeBaseline(in.Record); err == nil && r.SoakStart != nil && r.SoakAt.Equal(in.SoakStart) && r.SwapStart.Equal(in.SwapStart) {
			return in.Record, nil
		}
	}
	restored, err := g.restore(in.Node, in.BaselineStart, in.SwapStart, in.Record)
	if err != nil {
		return "", err
	}
	if err := g.cfg.Recorder.Sample(ctx, in.Node); err != nil {
		return "", fmt.Errorf("sampling node %s at its soak's start: %w", in.Node, err)
	}
	rec, err := g.cfg.Recorder.Record(in.Node, in.BaselineStart, in.SwapStart, in.SoakStart)
	if err != nil {
		return "", err
	}
	if rec.SoakStart == nil {
		return "", fmt.Errorf("node %s: no sample since its soak started at %s", in.Node, in.SoakStart.UTC().Format(time.RFC3339))
	}
	if restored != nil {
		rec.Pods, rec.Samples = restored.Pods, restored.Samples // the original window's, not the kept part's
	}
	enc, _, err := record.EncodeBaseline(rec, lim)
	return enc, err
}

// keepControls records what the judge reads of each control node (its
// baseline window's first and last samples, and once the soak started its
// first sample since, sampled now), within record.DefaultControlsBytes.
// A control without them is left out of the record, as the judge would
// leave it out; "" (logged) when none has them. A control record that
// already holds this soak's start is returned as it is.
func (g *Gate) keepControls(ctx context.Context, in gate.KeepInput, lim record.Limits) string {
	if len(in.Control) == 0 {
		return ""
	}
	if !in.SoakStart.IsZero() && in.Controls != "" {
		if c, err := record.DecodeControls(in.Controls); err == nil && c.SwapStart.Equal(in.SwapStart) && soakRecorded(c, in.SoakStart) {
			return in.Controls
		}
	}
	g.restoreControls(in.Node, in.Control, in.BaselineStart, in.SwapStart, in.Controls)
	c := record.Controls{SwapStart: in.SwapStart, Named: len(in.Control)}
	for _, n := range in.Control {
		if !in.SoakStart.IsZero() {
			_ = g.cfg.Recorder.Sample(ctx, n) // one that fails has no soak start: left out below
		}
		rec, err := g.cfg.Recorder.Record(n, in.BaselineStart, in.SwapStart, in.SoakStart)
		if err == nil && !in.SoakStart.IsZero() && rec.SoakStart == nil {
			err = fmt.Errorf("no sample since the soak started at %s", in.SoakStart.UTC().Format(time.RFC3339))
		}
		if err != nil {
			g.cfg.Logger.Debug("control node left out of the record", zap.String("node", in.Node), zap.String("control", n), zap.Error(err))
			continue
		}
		c.Nodes = append(c.Nodes, rec)
	}
	enc, nodes, pods, err := record.EncodeControls(c, lim)
	if err != nil {
		g.cfg.Logger.Info("no control record persisted: a successor leader would judge this node before/after alone", zap.String("node", in.Node), zap.Error(err))
		return ""
	}
	g.cfg.Logger.Debug("control record kept", zap.String("node", in.Node), zap.Int("controls", nodes), zap.Int("named", len(in.Control)), zap.Int("pods", pods), zap.Int("bytes", len(enc)))
	return enc
}

// soakRecorded says every control node in c holds its first sample of the
// soak that began at soakStart.
func soakRecorded(c record.Controls, soakStart time.Time) bool {
	for _, r := range c.Nodes {
		if r.SoakStart == nil || !r.SoakAt.Equal(soakStart) {
			return false
		}
	}
	return true
}

// restoreControls seeds the Recorder with the control nodes' persisted
// samples, for each named control it holds no baseline of its own for (a
// successor leader), and holds them for node (Done releases them). It
// returns the reason a verdict then gives: where the controls came from,
// or why the record could not serve (unreadable, or of another attempt);
// those controls are then left out by controls, each with its reason, and
// the judgement is the stricter for it, never a silent pass. "" when no
// control needed the record or the record held none of them.
func (g *Gate) restoreControls(node string, control []string, baselineStart, swapStart time.Time, enc string) string {
	var need []string
	for _, c := range control {
		if _, err := g.cfg.Recorder.Record(c, baselineStart, swapStart, time.Time{}); err != nil {
			need = append(need, c)
		}
	}
	if len(need) == 0 || enc == "" {
		return g.remembered(node, swapStart, func(r *restoredFrom) {}).controls
	}
	rec, err := record.DecodeControls(enc)
	if err != nil {
		return fmt.Sprintf("the control group's persisted record cannot be read (%v): the control nodes this process did not sample are left out", err)
	}
	if !rec.SwapStart.Equal(swapStart) {
		return fmt.Sprintf("the control group's persisted record is of the swap at %s, not this attempt's at %s: the control nodes this process did not sample are left out",
			rec.SwapStart.UTC().Format(time.RFC3339Nano), swapStart.UTC().Format(time.RFC3339Nano))
	}
	restored := 0
	for _, c := range need {
		r, ok := rec.Node(c)
		if !ok {
			continue // left out by controls, with its reason
		}
		if err := g.cfg.Recorder.Restore(c, r); err != nil {
			continue
		}
		g.mu.Lock()
		if g.holds[node] == nil {
			g.holds[node] = map[string]bool{node: true}
		}
		g.holds[node][c] = true
		g.mu.Unlock()
		restored++
	}
	if restored == 0 {
		return ""
	}
	reason := fmt.Sprintf("control group restored from the record of the swap at %s (this process did not sample it): %d control nodes of %d recorded, %d pods of %d kept",
		rec.SwapStart.UTC().Format(time.RFC3339), restored, rec.Named, rec.KeptPods(), rec.Pods)
	g.cfg.Logger.Info("control nodes restored from the persisted record", zap.String("node", node), zap.String("reason", reason))
	g.remembered(node, swapStart, func(r *restoredFrom) { r.controls = reason })
	return reason
}

// remembered applies set to what was restored for node's swap at swap (a
// record of another swap is forgotten) and returns it.
func (g *Gate) remembered(node string, swap time.Time, set func(*restoredFrom)) restoredFrom {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.restored[node]
	if !r.swap.Equal(swap) {
		r = restoredFrom{swap: swap}
	}
	set(&r)
	g.restored[node] = r
	return r
}

// restore seeds the Recorder with the persisted record when the Recorder
// has no baseline of its own for the node's window (a successor leader),
// and returns the record restored (nil: none was needed). With neither,
// it returns nil and the judgement fails on the missing baseline as
// before. A record that cannot be read, or is of another node or attempt,
// is an error: the node fails closed.
func (g *Gate) restore(node string, baselineStart, swapStart time.Time, enc string) (*record.Baseline, error) {
	if _, err := g.cfg.Recorder.Record(node, baselineStart, swapStart, time.Time{}); err == nil || enc == "" {
		return g.remembered(node, swapStart, func(r *restoredFrom) {}).baseline, nil
	}
	rec, err := record.DecodeBaseline(enc)
	if err != nil {
		return nil, fmt.Errorf("no baseline for node %s in this process, and its persisted baseline record cannot be read (%v): failing closed", node, err)
	}
	if rec.Node != node || !rec.SwapStart.Equal(swapStart) {
		return nil, fmt.Errorf("no baseline for node %s in this process, and its persisted baseline record is of node %s's swap at %s, not this attempt's at %s: failing closed",
			node, rec.Node, rec.SwapStart.UTC().Format(time.RFC3339Nano), swapStart.UTC().Format(time.RFC3339Nano))
	}
	if err := g.cfg.Recorder.Restore(node, rec); err != nil {
		return nil, err
	}
	g.cfg.Logger.Info("baseline restored from the persisted record", zap.String("node", node), zap.String("reason", restoredReason(rec)))
	g.remembered(node, swapStart, func(r *restoredFrom) { r.baseline = &rec })
	return &rec, nil
}

// restoredReason says, in a verdict, where the baseline came from.
func restoredReason(r record.Baseline) string {
	kept := 0
	if len(r.Baseline) > 0 {
		kept = len(r.Baseline[0].Snapshot.Pods)
	}
	return fmt.Sprintf("baseline restored from the record of the swap at %s (this process did not sample it): %d pods of %d kept, %d samples of %d",
		r.SwapStart.UTC().Format(time.RFC3339), kept, r.Pods, len(r.Baseline), r.Samples)
}
