package revisions

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/record"
	"github.com/nodewise/nodewise/health/wire"
)

// NodeTracker is an optional hook of a Gate: the controller calls Track on
// every reconcile of a live migration with the nodes that run its pods, so a
// gate that samples node agents has samples from before each wave.
type NodeTracker interface {
	Track(ctx context.Context, nodes []string)
}

// AgentGateConfig configures an AgentGate.
type AgentGateConfig struct {
	// Source serves each node agent's snapshot (remote.Agent). Required.
	Source health.SnapshotSource
	// Judge holds the statistics' thresholds (zero: health.Defaults()).
	Judge health.Config
	// Soak is how long a wave's pods are watched once Ready (default 1m).
	Soak time.Duration
	// Baseline is how far before a wave each workload's baseline reaches (default 5m).
	Baseline time.Duration
	// Every is how often tracked nodes are sampled (default 15s).
	Every time.Duration
	Log   *zap.Logger
	Now   func() time.Time
}

// AgentGate judges a sidecar wave from outside the mesh, with the node
// agents' per-pod evidence (resets, failed connects, connect latency):
//
//   - the migrated pods against the not-yet-migrated ones over the same
//     interval (the soak since the wave was Ready): the natural control group
//     while both revisions serve, which a cluster-wide change moves too;
//   - each migrated workload against its own baseline before the wave, scaled
//     by the change the control group showed between the same two intervals.
//
// Every test of one judgement shares one Holm correction. Fail: some row
// regressed. Inconclusive: still soaking, too little traffic, or no control
// group. Samples live in memory: after a controller restart a wave's
// workloads have no baseline until samples exist again, and only the control
// comparison (which needs none from before the wave) judges.
type AgentGate struct {
	cfg AgentGateConfig
	rec *record.Recorder
	mu  sync.Mutex
	// tracked are the nodes given to the recorder.
	tracked map[string]bool
}

// NewAgentGate validates cfg and fills its defaults. Run its sampler with Run.
func NewAgentGate(cfg AgentGateConfig) (*AgentGate, error) {
	if cfg.Source == nil {
		return nil, errors.New("revisions.AgentGateConfig.Source is required (a remote.Agent or any SnapshotSource)")
	}
	if cfg.Judge.Significance == 0 {
		cfg.Judge = health.Defaults()
	}
	j, err := health.NewConfig(cfg.Judge)
	if err != nil {
		return nil, fmt.Errorf("revisions.AgentGateConfig.Judge: %w", err)
	}
	cfg.Judge = j
	if cfg.Soak == 0 {
		cfg.Soak = time.Minute
	}
	if cfg.Baseline == 0 {
		cfg.Baseline = 5 * time.Minute
	}
	if cfg.Every == 0 {
		cfg.Every = 15 * time.Second
	}
	if cfg.Soak < 0 || cfg.Baseline < 0 || cfg.Every < 0 {
		return nil, errors.New("revisions.AgentGateConfig: Soak, Baseline and Every must be > 0")
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rec, err := record.NewRecorder(record.RecorderConfig{Source: cfg.Source, Every: cfg.Every, Keep: cfg.Baseline + 2*cfg.Soak + time.Hour, Logger: cfg.Log, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	return &AgentGate{cfg: cfg, rec: rec, tracked: map[string]bool{}}, nil
}

// Run samples the tracked nodes until ctx ends.
func (g *AgentGate) Run(ctx context.Context) error { return g.rec.Run(ctx) }

// Track implements NodeTracker: new nodes are sampled from now on.
func (g *AgentGate) Track(ctx context.Context, nodes []string) {
	for _, n := range nodes {
		g.mu.Lock()
		seen := g.tracked[n]
		g.tracked[n] = true
		g.mu.Unlock()
		if !seen {
			if err := g.rec.Track(ctx, n); err != nil {
				g.cfg.Log.Info("cannot sample node agent yet", zap.String("node", n), zap.Error(err))
			}
		}
	}
}

// Judge implements Gate.
func (g *AgentGate) Judge(ctx context.Context, in WaveInput) (health.Verdict, error) {
	now := g.cfg.Now()
	if in.ReadyAt.IsZero() {
		return health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"the wave has no Ready time yet"}}, nil
	}
	if until := in.ReadyAt.Add(g.cfg.Soak); now.Before(until) {
		return health.Verdict{Outcome: health.Inconclusive, Reasons: []string{fmt.Sprintf("soaking on the new proxy until %s", until.UTC().Format(time.RFC3339))}}, nil
	}
	g.Track(ctx, in.Nodes)
	wave, control := set(in.Namespaces), set(in.Control)
	var treated, ctrlSoak, ctrlBase health.Population
	before := map[string]*health.Population{} // workload -> baseline
	after := map[string]*health.Population{}
	var notes []string
	for _, node := range in.Nodes {
		cur, err := g.rec.Snapshot(ctx, node) // on the recorder's clock, as its samples are
		if err != nil {
			// Fail closed: an agent that cannot be read holds the wave.
			return health.Verdict{}, fmt.Errorf("reading the node agent of %s: %w", node, err)
		}
		base, _, err := g.rec.Windows(node, in.Since.Add(-g.cfg.Baseline), in.Since, in.ReadyAt)
		if err != nil {
			return health.Verdict{}, fmt.Errorf("node %s: %w", node, err)
		}
		// The soak starts at the first sample since the wave was Ready that
		// already holds every migrated pod running now, so each is watched
		// through the whole window.
		since, _, _ := g.rec.Windows(node, in.ReadyAt, now, in.ReadyAt)
		soakStart, ok := firstWith(since, cur, wave)
		if !ok {
			return health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"soaking: waiting for an agent sample that holds every migrated pod"}}, nil
		}
		if cur.Time.Sub(soakStart.Time) < g.cfg.Soak {
			return health.Verdict{Outcome: health.Inconclusive, Reasons: []string{fmt.Sprintf("soaking on the new proxy until %s", soakStart.Time.Add(g.cfg.Soak).UTC().Format(time.RFC3339))}}, nil
		}
		soak, err := health.NewWindow(soakStart, cur)
		if err != nil {
			return health.Verdict{}, fmt.Errorf("node %s soak window: %w", node, err)
		}
		for _, p := range soak.Pods {
			if p.Appeared || p.Side != wire.SideApp {
				continue
			}
			switch {
			case wave[p.Namespace]:
				treated.Add(p)
				w := p.Namespace + "/" + workloadOf(p.Name)
				if after[w] == nil {
					after[w] = &health.Population{}
				}
				after[w].Add(p)
			case control[p.Namespace]:
				ctrlSoak.Add(p)
			}
		}
		if len(base) < 2 {
			notes = append(notes, fmt.Sprintf("node %s: %d agent samples before the wave, no baseline", node, len(base)))
			continue
		}
		bw, err := health.NewWindow(base[0], base[len(base)-1])
		if err != nil {
			notes = append(notes, fmt.Sprintf("node %s baseline: %v", node, err))
			continue
		}
		for _, p := range bw.Pods {
			if p.Side != wire.SideApp {
				continue
			}
			switch {
			case wave[p.Namespace]:
				w := p.Namespace + "/" + workloadOf(p.Name)
				if before[w] == nil {
					before[w] = &health.Population{}
				}
				before[w].Add(p)
			case control[p.Namespace]:
				ctrlBase.Add(p)
			}
		}
	}
	j := judgeWave(g.cfg.Judge, in, treated, ctrlSoak, ctrlBase, before, after)
	j.notes = append(j.notes, notes...)
	return j.verdict(now), nil
}

// firstWith returns the first sample holding every pod of the namespaces
// that cur holds (by UID).
func firstWith(samples []wire.Snapshot, cur wire.Snapshot, namespaces map[string]bool) (wire.Snapshot, bool) {
	want := map[string]bool{}
	for _, p := range cur.Pods {
		if namespaces[p.Namespace] {
			want[p.UID] = true
		}
	}
	for _, s := range samples {
		have := map[string]bool{}
		for _, p := range s.Pods {
			if want[p.UID] {
				have[p.UID] = true
			}
		}
		if len(have) == len(want) && s.Time.Before(cur.Time) {
			return s, true
		}
	}
	return wire.Snapshot{}, false
}

// waveJudgement is one judgement's rows before they become a Verdict.
type waveJudgement struct {
	outcome health.Outcome
	rows    []waveRow
	reasons []string
	notes   []string
}

type waveRow struct {
	subject string
	test    health.PopulationTest
}

// judgeWave runs both families of tests with one Holm correction. It is pure.
func judgeWave(cfg health.Config, in WaveInput, treated, ctrlSoak, ctrlBase health.Population, before, after map[string]*health.Population) waveJudgement {
	var j waveJudgement
	controlName := "not-yet-migrated pods"
	if in.ControlMigrated {
		controlName = "pods of earlier waves"
	}
	if ctrlSoak.Pods > 0 {
		for _, t := range health.ComparePopulations(cfg, ctrlSoak, treated, health.Scale{Count: 1, Latency: 1}) {
			j.rows = append(j.rows, waveRow{subject: fmt.Sprintf("migrated pods (%d) vs %s (%d)", treated.Pods, controlName, ctrlSoak.Pods), test: t})
		}
	}
	scale := health.ControlScale(ctrlBase, ctrlSoak)
	workloads := make([]string, 0, len(after))
	for w := range after {
		workloads = append(workloads, w)
	}
	sort.Strings(workloads)
	for _, w := range workloads {
		b := before[w]
		if b == nil {
			continue
		}
		for _, t := range health.ComparePopulations(cfg, *b, *after[w], scale) {
			j.rows = append(j.rows, waveRow{subject: "workload " + w + " vs its baseline", test: t})
		}
	}
	var ps []float64
	var idx []int
	controlTested := false
	for i, r := range j.rows {
		if r.test.Tested {
			ps = append(ps, r.test.P)
			idx = append(idx, i)
			if strings.HasPrefix(r.subject, "migrated pods") {
				controlTested = true
			}
		}
	}
	for k, adj := range health.Holm(ps) {
		j.rows[idx[k]].test.PAdj = adj
	}
	for _, r := range j.rows {
		if r.test.Tested && r.test.PAdj <= cfg.Significance && r.test.ClearsFloors {
			j.reasons = append(j.reasons, r.reason())
		}
	}
	switch {
	case len(j.reasons) > 0:
		j.outcome = health.Fail
	case ctrlSoak.Pods == 0:
		j.outcome = health.Inconclusive
		j.reasons = append(j.reasons, "no control group: no pod outside the wave was observed through the soak")
	case !controlTested:
		j.outcome = health.Inconclusive
		// A stable reason (the counts are in the table): status is written
		// only when the reason changes.
		j.reasons = append(j.reasons, "not enough traffic to judge the migrated pods against the "+controlName)
	default:
		j.outcome = health.Pass
	}
	return j
}

func (r waveRow) reason() string {
	t := r.test
	if t.Metric.IsLatency() {
		return fmt.Sprintf("%s: %s p99 %s -> %s, %s", r.subject, t.Metric, health.FormatMicros(t.Ref), health.FormatMicros(t.Got), health.FormatP(t.PAdj))
	}
	return fmt.Sprintf("%s: %s %s -> %s per connection, %s", r.subject, t.Metric, fmtPerConn(t.Ref), fmtPerConn(t.Got), health.FormatP(t.PAdj))
}

func fmtPerConn(v float64) string { return fmt.Sprintf("%.3g", v) }

// verdict turns the judgement into the gate's verdict, with the table as
// its Summary rows.
func (j waveJudgement) verdict(now time.Time) health.Verdict {
	v := health.Verdict{Outcome: j.outcome, Reasons: append(j.reasons, j.notes...)}
	s := &v1alpha1.NodeJudgement{JudgedAt: now.UTC().Format(time.RFC3339), IntervalOutcome: j.outcome}
	for _, r := range j.rows {
		t := r.test
		row := v1alpha1.JudgementRow{Pod: r.subject, Metric: t.Metric, Regressed: t.Tested && r.reasonIn(j.reasons), Note: t.Note}
		if t.Metric.IsLatency() {
			row.Before, row.After = "p99 "+health.FormatMicros(t.Ref), "p99 "+health.FormatMicros(t.Got)
		} else {
			row.Before, row.After = fmtPerConn(t.Ref)+"/conn", fmtPerConn(t.Got)+"/conn"
		}
		if t.Tested {
			s.Tests++
			row.P = health.FormatP(t.PAdj)
			if !t.ClearsFloors && row.Note == "" {
				row.Note = "below the floors"
			}
		}
		if row.Regressed {
			s.Regressions++
		}
		s.Rows = append(s.Rows, row)
	}
	v.Summary = s
	return v
}

func (r waveRow) reasonIn(reasons []string) bool {
	want := r.reason()
	for _, s := range reasons {
		if s == want {
			return true
		}
	}
	return false
}

func set(names []string) map[string]bool {
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out
}

var (
	podSuffix   = regexp.MustCompile(`-[a-z0-9]{5}$`)
	templateSfx = regexp.MustCompile(`-[a-z0-9]{6,10}$`)
	ordinalSfx  = regexp.MustCompile(`-[0-9]+$`)
)

// workloadOf names a pod's workload from its name, so that a workload's old
// pods (before its restart) and new ones are one population: a StatefulSet's
// ordinal, or a Deployment's pod-template hash and a pod suffix, are cut.
func workloadOf(pod string) string {
	if ordinalSfx.MatchString(pod) {
		return ordinalSfx.ReplaceAllString(pod, "")
	}
	name := podSuffix.ReplaceAllString(pod, "")
	if name != pod {
		if t := templateSfx.ReplaceAllString(name, ""); t != name {
			return t
		}
	}
	return name
}

// judgementOf is the persisted form of a verdict's table.
func judgementOf(v health.Verdict) *v1alpha1.WaveJudgement {
	j := &v1alpha1.WaveJudgement{Outcome: string(v.Outcome)}
	for i, r := range v.Reasons {
		if i == 16 {
			break
		}
		if len(r) > 512 {
			r = r[:512]
		}
		j.Reasons = append(j.Reasons, r)
	}
	if v.Summary != nil {
		j.JudgedAt = v.Summary.JudgedAt
		for i, r := range v.Summary.Rows {
			if i == 64 {
				break
			}
			j.Rows = append(j.Rows, r)
		}
	}
	return j
}
