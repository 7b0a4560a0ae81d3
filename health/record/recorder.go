package record

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
)

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	Source health.SnapshotSource // required
	// Every is how often each tracked node is sampled (default 30s, so the
	// default 5m baseline holds 11 samples). The baseline's dispersion
	// estimate needs at least three samples in it.
	Every time.Duration
	// Keep is how long samples are kept (default 3h): longer than a node's
	// baseline, swap and soak together.
	Keep time.Duration
	// SkewTolerance is how far an agent's time may lie outside the request's
	// interval on the orchestrator's clock before the sample is placed on the
	// orchestrator's clock instead (default DefaultSkewTolerance, 1s).
	SkewTolerance time.Duration
	Logger        *zap.Logger
	// Now is the orchestrator's clock, read before each request and after
	// its answer (default time.Now). The windows' times (baseline start, swap,
	// soak start) must come from the same clock.
	Now func() time.Time
}

// Recorder samples the snapshots of the nodes a rollout is working on, so a
// judgement given only times (baseline start, swap, soak start) can find the
// snapshots of those moments. It keeps them in memory; what a judgement
// needs of them survives a restart only as a persisted record (Record,
// EncodeBaseline), which a successor's Recorder takes back (Restore). Without
// one, a node restarted mid-soak has no baseline, and the judge fails closed
// rather than judge without one.
//
// Every sample is placed on the orchestrator's clock (Now before the request
// and after the answer), not the agent's: the windows hold the samples
// surely read inside them, and the snapshots the Recorder returns carry the
// placed time, so no agent clock running ahead or behind can move a sample
// across the swap or stretch a rate. An answer whose seq did not advance is
// not a new sample, whatever its time says. The Recorder is itself a
// SnapshotSource: the judge reads the current snapshot through it, on the
// same clock as the windows.
type Recorder struct {
	cfg RecorderConfig

	mu      sync.Mutex
	tracked map[string]*history
}

// history is one tracked node's samples, oldest first.
type history struct {
	samples []sample
	// repeats counts the answers since the newest sample whose seq did not advance.
	repeats int
	skewed  bool // the newest sample was skewed (logged once per change)
}

var _ health.SnapshotSource = (*Recorder)(nil)

// ErrNotTracked is wrapped by Windows for a node this Recorder never
// sampled: no baseline was recorded in this process.
var ErrNotTracked = errors.New("never tracked: no baseline recorded in this process")

// NewRecorder validates cfg and fills its defaults.
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if cfg.Source == nil {
		return nil, errors.New("record.RecorderConfig.Source is required")
	}
	if cfg.Every == 0 {
		cfg.Every = 30 * time.Second
	}
	if cfg.Keep == 0 {
		cfg.Keep = 3 * time.Hour
	}
	if cfg.SkewTolerance == 0 {
		cfg.SkewTolerance = DefaultSkewTolerance
	}
	if cfg.Every < 0 || cfg.Keep < cfg.Every {
		return nil, fmt.Errorf("record.RecorderConfig: need 0 < Every (%s) ≤ Keep (%s)", cfg.Every, cfg.Keep)
	}
	if cfg.SkewTolerance < 0 {
		return nil, fmt.Errorf("record.RecorderConfig.SkewTolerance %s: must be positive", cfg.SkewTolerance)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Recorder{cfg: cfg, tracked: map[string]*history{}}, nil
}

// Track starts sampling node and takes its first sample now, so an
// unreachable agent is an error at preflight, before the node is touched.
func (r *Recorder) Track(ctx context.Context, node string) error {
	r.mu.Lock()
	if _, ok := r.tracked[node]; !ok {
		r.tracked[node] = &history{}
	}
	r.mu.Unlock()
	return r.Sample(ctx, node)
}

// Untrack stops sampling node and forgets its samples.
func (r *Recorder) Untrack(node string) {
	r.mu.Lock()
	delete(r.tracked, node)
	r.mu.Unlock()
}

// Sample takes one snapshot of a tracked node now.
func (r *Recorder) Sample(ctx context.Context, node string) error {
	_, err := r.Snapshot(ctx, node)
	return err
}

// Snapshot implements SnapshotSource on the orchestrator's clock: it asks
// the node's agent now and returns the node's newest sample, its time
// placed on the orchestrator's clock. For a tracked node whose agent
// answers with a seq that did not advance, that is the previous sample, with
// the time it was placed at then: the judge then sees how old it really is.
// An untracked node's answer is placed alone and not kept.
func (r *Recorder) Snapshot(ctx context.Context, node string) (wire.Snapshot, error) {
	sent := r.cfg.Now()
	s, err := r.cfg.Source.Snapshot(ctx, node)
	received := r.cfg.Now()
	if err != nil {
		return wire.Snapshot{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.tracked[node]
	if !ok {
		return place(nil, s, sent, received, r.cfg.SkewTolerance).placed(), nil
	}
	var prev *sample
	if n := len(h.samples); n > 0 {
		prev = &h.samples[n-1]
		if !isNew(prev.snap, s) {
			if s.Seq != 0 {
				h.repeats++
				r.cfg.Logger.Debug("node agent answered with a snapshot already sampled", zap.String("node", node),
					zap.Uint64("seq", s.Seq), zap.Time("agentTime", s.Time), zap.Int("repeats", h.repeats))
			}
			return prev.placed(), nil
		}
	}
	p := place(prev, s, sent, received, r.cfg.SkewTolerance)
	if p.skewed != h.skewed {
		if p.skewed {
			r.cfg.Logger.Info("node agent's clock is off the orchestrator's: placing its samples on the orchestrator's clock",
				zap.String("node", node), zap.Duration("offset", p.offset), zap.Duration("tolerance", r.cfg.SkewTolerance))
		} else {
			r.cfg.Logger.Info("node agent's clock agrees with the orchestrator's again", zap.String("node", node), zap.Duration("offset", p.offset))
		}
		h.skewed = p.skewed
	}
	h.repeats = 0
	list := append(h.samples, p)
	cut := r.cfg.Now().Add(-r.cfg.Keep)
	i := sort.Search(len(list), func(i int) bool { return !list[i].received.Before(cut) })
	h.samples = list[i:]
	return p.placed(), nil
}

// Run samples every tracked node each Every until ctx ends. A failed sample is
// logged and retried at the next tick; the judge notices missing samples.
func (r *Recorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		r.mu.Lock()
		nodes := make([]string, 0, len(r.tracked))
		for n := range r.tracked {
			nodes = append(nodes, n)
		}
		r.mu.Unlock()
		sort.Strings(nodes)
		for _, n := range nodes {
			if err := r.Sample(ctx, n); err != nil {
				r.cfg.Logger.Info("cannot sample node agent", zap.String("node", n), zap.Error(err))
			}
		}
	}
}

// Windows returns the samples a judgement needs, by the orchestrator's
// clock: every sample surely read in [baselineStart, swapStart] (sent at or
// after the start, answered at or before the swap started: the baseline
// series) since the agent's last restart in it (BaselineNote says so), and the first sample sent at or after soakStart. The snapshots
// carry their times as placed on the orchestrator's clock. err says what is
// missing.
func (r *Recorder) Windows(node string, baselineStart, swapStart, soakStart time.Time) (baseline []wire.Snapshot, soak wire.Snapshot, err error) {
	list, _, tracked := r.samples(node)
	if !tracked {
		return nil, wire.Snapshot{}, fmt.Errorf("node %s: %w (Track starts at preflight; a successor needs the node's persisted baseline record, Restore)", node, ErrNotTracked)
	}
	kept, _ := lastEpoch(list, baselineStart, swapStart)
	for _, s := range kept {
		baseline = append(baseline, s.placed())
	}
	for _, s := range list {
		if s.inSoak(soakStart) {
			return baseline, s.placed(), nil
		}
	}
	return baseline, wire.Snapshot{}, fmt.Errorf("node %s: no snapshot recorded since the soak started at %s", node, soakStart.UTC().Format(time.RFC3339))
}

// Clock reports what the Recorder measured of the node agent's clock over
// the samples of a judgement with these windows (see Clock.Mattered).
func (r *Recorder) Clock(node string, baselineStart, swapStart, soakStart time.Time) Clock {
	list, repeats, _ := r.samples(node)
	return clockOver(node, list, repeats, r.cfg.SkewTolerance, baselineStart, swapStart, soakStart)
}

// samples copies a node's samples and its repeats since the newest.
func (r *Recorder) samples(node string) (list []sample, repeats int, tracked bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.tracked[node]
	if !ok {
		return nil, 0, false
	}
	return append([]sample(nil), h.samples...), h.repeats, true
}

// Record is the node's samples a judgement with these windows needs, for
// EncodeBaseline: every sample surely read in [baselineStart, swapStart] and,
// when soakStart is set, the first sent at or after it (none yet is no
// error: the record then holds the baseline alone). err says what is
// missing, as Windows does.
func (r *Recorder) Record(node string, baselineStart, swapStart, soakStart time.Time) (Baseline, error) {
	list, _, tracked := r.samples(node)
	if !tracked {
		return Baseline{}, fmt.Errorf("node %s: %w", node, ErrNotTracked)
	}
	out := Baseline{Node: node, BaselineStart: baselineStart, SwapStart: swapStart}
	kept, _ := lastEpoch(list, baselineStart, swapStart)
	for _, s := range kept {
		out.Baseline = append(out.Baseline, s.recorded())
	}
	if len(out.Baseline) < 2 {
		return Baseline{}, fmt.Errorf("node %s: %d samples recorded in the baseline window, need at least 2", node, len(out.Baseline))
	}
	if !soakStart.IsZero() {
		for _, s := range list {
			if s.inSoak(soakStart) {
				rs := s.recorded()
				out.SoakStart, out.SoakAt = &rs, soakStart
				break
			}
		}
	}
	return out, nil
}

// Restore tracks node and puts a persisted record's samples back among its
// own (a successor's Recorder, which never saw the baseline), each where
// the predecessor placed it. A sample it already holds (the same agent
// epoch and seq, or time) is not added twice.
func (r *Recorder) Restore(node string, rec Baseline) error {
	if rec.Node != node {
		return fmt.Errorf("the baseline record is of node %q, not %s", rec.Node, node)
	}
	restored := make([]sample, 0, len(rec.Baseline)+1)
	for _, s := range rec.Baseline {
		restored = append(restored, r.fromRecord(s))
	}
	if rec.SoakStart != nil {
		restored = append(restored, r.fromRecord(*rec.SoakStart))
	}
	r.merge(node, restored)
	return nil
}

// merge tracks node and adds samples to its own, in the order of their
// placed times, leaving out those it already holds (the same agent epoch
// and seq, or time).
func (r *Recorder) merge(node string, restored []sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.tracked[node]
	if !ok {
		h = &history{}
		r.tracked[node] = h
	}
	merged := append([]sample(nil), h.samples...)
	for _, s := range restored {
		dup := false
		for _, m := range merged {
			dup = dup || (sameEpoch(m.snap, s.snap) && !isNew(m.snap, s.snap) && !isNew(s.snap, m.snap))
		}
		if !dup {
			merged = append(merged, s)
		}
	}
	sort.SliceStable(merged, func(i, j int) bool { return merged[i].at.Before(merged[j].at) })
	h.samples = merged
}

// recorded is the sample as a Baseline holds it.
func (s sample) recorded() RecordedSample {
	return RecordedSample{Snapshot: s.snap, At: s.at, Sent: s.sent, Received: s.received}
}

// fromRecord is a recorded sample as the Recorder holds its own, its
// offset and skew measured again against this Recorder's tolerance.
func (r *Recorder) fromRecord(rs RecordedSample) sample {
	s := sample{snap: rs.Snapshot, at: rs.At, sent: rs.Sent, received: rs.Received, shift: rs.Snapshot.Time.Sub(rs.At)}
	mid := s.sent.Add(s.received.Sub(s.sent) / 2)
	s.offset = s.snap.Time.Sub(mid)
	tol := r.cfg.SkewTolerance
	s.skewed = s.snap.Time.Before(s.sent.Add(-tol)) || s.snap.Time.After(s.received.Add(tol))
	return s
}
