package health

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
)

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	Source SnapshotSource // required
	// Every is how often each tracked node is sampled (default 30s, so the
	// default 5m baseline holds 11 samples). The baseline's dispersion
	// estimate needs at least three samples in it.
	Every time.Duration
	// Keep is how long samples are kept (default 3h): longer than a node's
	// baseline, swap and soak together.
	Keep   time.Duration
	Logger *zap.Logger
	Now    func() time.Time
}

// Recorder samples the snapshots of the nodes a rollout is working on, so a
// judgement given only times (baseline start, swap, soak start) can find the
// snapshots of those moments. It keeps them in memory: an orchestrator that
// restarts mid-node has no baseline for that node, and the judge then fails
// closed rather than judge without one.
type Recorder struct {
	cfg RecorderConfig

	mu      sync.Mutex
	tracked map[string][]Snapshot
}

// NewRecorder validates cfg and fills its defaults.
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if cfg.Source == nil {
		return nil, errors.New("health.RecorderConfig.Source is required")
	}
	if cfg.Every == 0 {
		cfg.Every = 30 * time.Second
	}
	if cfg.Keep == 0 {
		cfg.Keep = 3 * time.Hour
	}
	if cfg.Every < 0 || cfg.Keep < cfg.Every {
		return nil, fmt.Errorf("health.RecorderConfig: need 0 < Every (%s) ≤ Keep (%s)", cfg.Every, cfg.Keep)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Recorder{cfg: cfg, tracked: map[string][]Snapshot{}}, nil
}

// Track starts sampling node and takes its first sample now, so an
// unreachable agent is an error at preflight, before the node is touched.
func (r *Recorder) Track(ctx context.Context, node string) error {
	r.mu.Lock()
	if _, ok := r.tracked[node]; !ok {
		r.tracked[node] = nil
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
	s, err := r.cfg.Source.Snapshot(ctx, node)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	list, ok := r.tracked[node]
	if !ok {
		return nil // untracked meanwhile
	}
	if n := len(list); n > 0 && !s.Time.After(list[n-1].Time) {
		return nil // the agent has not moved on since the last sample
	}
	list = append(list, s)
	cut := r.cfg.Now().Add(-r.cfg.Keep)
	i := sort.Search(len(list), func(i int) bool { return !list[i].Time.Before(cut) })
	r.tracked[node] = list[i:]
	return nil
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

// Windows returns the samples a judgement needs: every sample taken in
// [baselineStart, swapStart] (the baseline series), and the first sample at or
// after soakStart. ok is false, with a reason, when either is missing.
func (r *Recorder) Windows(node string, baselineStart, swapStart, soakStart time.Time) (baseline []Snapshot, soak Snapshot, err error) {
	r.mu.Lock()
	list, tracked := r.tracked[node]
	list = append([]Snapshot(nil), list...)
	r.mu.Unlock()
	if !tracked {
		return nil, Snapshot{}, fmt.Errorf("node %s was never tracked: no baseline recorded (the orchestrator must call Track at preflight; after an orchestrator restart mid-node the baseline is lost)", node)
	}
	for _, s := range list {
		if !s.Time.Before(baselineStart) && !s.Time.After(swapStart) {
			baseline = append(baseline, s)
		}
	}
	for _, s := range list {
		if !s.Time.Before(soakStart) {
			return baseline, s, nil
		}
	}
	return baseline, Snapshot{}, fmt.Errorf("node %s: no snapshot recorded since the soak started at %s", node, soakStart.UTC().Format(time.RFC3339))
}
