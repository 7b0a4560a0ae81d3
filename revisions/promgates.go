package revisions

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/remote"
)

// The series the built-in gates read, as Istio and Envoy name them.
const (
	// istiod counts each xDS response a proxy rejected (NACKed), by xDS
	// type (cds, eds, lds, rds, ecds, ...); istio/istio pkg/xds/monitoring.go.
	metricXDSRejects = "pilot_total_xds_rejects"
	// istio_build{component="pilot"} is exported by every istiod: it tells a
	// revision that is scraped and rejects nothing from one not scraped.
	metricIstioBuild = "istio_build"
	// Envoy's per-cluster request and retry counters, from the sidecars'
	// /stats/prometheus (not in Istio's default stats inclusion list: they
	// need proxyStatsMatcher, such as inclusionRegexps ".*upstream_rq_(retry|total)$").
	metricRetries  = "envoy_cluster_upstream_rq_retry"
	metricRequests = "envoy_cluster_upstream_rq_total"
)

// Defaults of spec.gates.prometheus.builtIn.
const (
	DefaultBuiltInSoak     = v1alpha1.DefaultBuiltInSoak
	DefaultBuiltInBaseline = v1alpha1.DefaultBuiltInBaseline
	DefaultRevisionLabel   = "istio_io_rev"
	DefaultNamespaceLabel  = "namespace"
)

// Row metrics of the built-in gates in a wave's judgement table.
const (
	MetricXDSRejects        v1alpha1.Metric = "xdsRejects"
	MetricRetriesPerRequest v1alpha1.Metric = "retriesPerRequest"
)

// builtInConfig is spec.gates.prometheus.builtIn with its defaults.
type builtInConfig struct {
	soak, baseline time.Duration
	nack           bool
	revisionLabel  string
	maxRejects     float64
	retries        bool
	namespaceLabel string
	maxRise        float64
	minExcess      float64
	minRequests    float64
	maxErrors      int
}

var promLabel = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// builtInOf reads spec.gates.prometheus.builtIn; on is false when the
// migration turned both gates off. Errors name the field.
func builtInOf(p *v1alpha1.PrometheusGates) (cfg builtInConfig, on bool, err error) {
	cfg = builtInConfig{soak: DefaultBuiltInSoak, baseline: DefaultBuiltInBaseline, nack: true, revisionLabel: DefaultRevisionLabel,
		retries: true, namespaceLabel: DefaultNamespaceLabel, maxRise: 2, minExcess: 0.01, minRequests: 100, maxErrors: 3}
	if p.MaxConsecutiveErrors > 0 {
		cfg.maxErrors = int(p.MaxConsecutiveErrors)
	}
	b := p.BuiltIn
	if b == nil {
		return cfg, true, nil
	}
	for _, d := range []struct {
		field string
		in    *v1alpha1.Duration
		out   *time.Duration
	}{{"soak", b.Soak, &cfg.soak}, {"baseline", b.Baseline, &cfg.baseline}} {
		if d.in == nil {
			continue
		}
		if err := d.in.Err(); err != nil {
			return cfg, false, fmt.Errorf("gates.prometheus.builtIn.%s: %w", d.field, err)
		}
		if d.in.Duration <= 0 {
			return cfg, false, fmt.Errorf("gates.prometheus.builtIn.%s %s: must be a positive duration such as 1m", d.field, d.in.Duration)
		}
		*d.out = d.in.Duration
	}
	cfg.nack, cfg.retries = !b.ConfigAcceptance.Disabled, !b.Retries.Disabled
	if l := b.ConfigAcceptance.RevisionLabel; l != "" {
		if !promLabel.MatchString(l) {
			return cfg, false, fmt.Errorf("gates.prometheus.builtIn.configAcceptance.revisionLabel %q: must be a Prometheus label name", l)
		}
		cfg.revisionLabel = l
	}
	if b.ConfigAcceptance.MaxRejects < 0 {
		return cfg, false, fmt.Errorf("gates.prometheus.builtIn.configAcceptance.maxRejects %d: must not be negative", b.ConfigAcceptance.MaxRejects)
	}
	cfg.maxRejects = float64(b.ConfigAcceptance.MaxRejects)
	r := b.Retries
	if r.NamespaceLabel != "" {
		if !promLabel.MatchString(r.NamespaceLabel) {
			return cfg, false, fmt.Errorf("gates.prometheus.builtIn.retries.namespaceLabel %q: must be a Prometheus label name", r.NamespaceLabel)
		}
		cfg.namespaceLabel = r.NamespaceLabel
	}
	for _, d := range []struct {
		field, in string
		min       float64
		out       *float64
	}{{"maxRise", r.MaxRise, 1, &cfg.maxRise}, {"minExcess", r.MinExcess, 0, &cfg.minExcess}} {
		if d.in == "" {
			continue
		}
		f, err := strconv.ParseFloat(d.in, 64)
		if err != nil || f < d.min || math.IsInf(f, 0) {
			return cfg, false, fmt.Errorf("gates.prometheus.builtIn.retries.%s %q: must be a decimal of at least %g", d.field, d.in, d.min)
		}
		*d.out = f
	}
	if r.MinRequests < 0 {
		return cfg, false, fmt.Errorf("gates.prometheus.builtIn.retries.minRequests %d: must be at least 1", r.MinRequests)
	}
	if r.MinRequests > 0 {
		cfg.minRequests = float64(r.MinRequests)
	}
	return cfg, !b.Disabled && (cfg.nack || cfg.retries), nil
}

// Querier evaluates PromQL instant queries (remote.Prometheus).
type Querier interface {
	Query(ctx context.Context, q string, at time.Time) ([]remote.PromSample, error)
}

// builtInGates are the sidecar wing's built-in Prometheus gates of one
// migration: config acceptance (NACKs) per revision and retry volume.
type builtInGates struct {
	cfg  builtInConfig
	prom Querier
	now  func() time.Time
	mu   sync.Mutex
	errs map[string]int // wave -> query errors in a row
}

// Judge implements Gate. The gates hold the wave while it soaks, then judge
// the soak [ReadyAt, now]. A query error holds the wave and fails it after
// maxConsecutiveErrors in a row (fail closed); a query with nothing in it
// passes with a reason.
func (g *builtInGates) Judge(ctx context.Context, in WaveInput) (health.Verdict, error) {
	now := g.now()
	if in.ReadyAt.IsZero() {
		return health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"built-in gates: the wave has no Ready time yet"}}, nil
	}
	if until := in.ReadyAt.Add(g.cfg.soak); now.Before(until) {
		return health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"built-in gates: soaking on the new proxy until " + until.UTC().Format(time.RFC3339)}}, nil
	}
	var res builtInResult
	var err error
	if g.cfg.nack {
		err = g.configAcceptance(ctx, in, now, &res)
	}
	if err == nil && g.cfg.retries {
		err = g.retryVolume(ctx, in, now, &res)
	}
	g.mu.Lock()
	if err != nil {
		g.errs[in.Wave]++
		n := g.errs[in.Wave]
		g.mu.Unlock()
		msg := fmt.Sprintf("built-in gates: %v (%d of %d errors in a row)", err, n, g.cfg.maxErrors)
		if n >= g.cfg.maxErrors {
			return health.Verdict{Outcome: health.Fail, Reasons: []string{msg}}, nil
		}
		return health.Verdict{Outcome: health.Inconclusive, Reasons: []string{msg}}, nil
	}
	g.errs[in.Wave] = 0
	g.mu.Unlock()
	s := &v1alpha1.NodeJudgement{JudgedAt: now.UTC().Format(time.RFC3339), Rows: res.rows}
	for _, r := range res.rows {
		if r.P != "" || r.Regressed {
			s.Tests++
		}
		if r.Regressed {
			s.Regressions++
		}
	}
	if len(res.fails) > 0 {
		s.IntervalOutcome = health.Fail
		return health.Verdict{Outcome: health.Fail, Reasons: res.fails, Summary: s}, nil
	}
	s.IntervalOutcome = health.Pass
	return health.Verdict{Outcome: health.Pass, Reasons: res.notes, Summary: s}, nil
}

type builtInResult struct {
	fails, notes []string
	rows         []v1alpha1.JudgementRow
}

// anyOf is a PromQL string literal of an anchored regular expression
// matching exactly the values.
func anyOf(values ...string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = regexp.QuoteMeta(v)
	}
	return strconv.Quote("^(" + strings.Join(q, "|") + ")$")
}

// seconds is d as a PromQL range, at least 1s.
func seconds(d time.Duration) string { return strconv.Itoa(max(int(d.Seconds()), 1)) + "s" }

// configAcceptance counts the rejected xDS responses of each revision over
// the soak. A counter series born inside the soak (istiod exports a type's
// series on its first rejection) counts from zero, which increase() would
// miss; a reset (istiod restarted) is what increase() handles. So each
// (revision, type) counts max(now - at the soak's start, increase).
func (g *builtInGates) configAcceptance(ctx context.Context, in WaveInput, now time.Time, res *builtInResult) error {
	L := g.cfg.revisionLabel
	sel := fmt.Sprintf(`%s=~%s`, L, anyOf(in.From, in.To))
	window := now.Sub(in.ReadyAt)
	present, err := g.prom.Query(ctx, fmt.Sprintf(`count by (%s) (%s{component="pilot",%s})`, L, metricIstioBuild, sel), now)
	if err != nil {
		return fmt.Errorf("config acceptance: %w", err)
	}
	cur, err := g.prom.Query(ctx, fmt.Sprintf(`sum by (%s, type) (%s{%s})`, L, metricXDSRejects, sel), now)
	if err != nil {
		return fmt.Errorf("config acceptance: %w", err)
	}
	start, err := g.prom.Query(ctx, fmt.Sprintf(`sum by (%s, type) (%s{%s})`, L, metricXDSRejects, sel), in.ReadyAt)
	if err != nil {
		return fmt.Errorf("config acceptance: %w", err)
	}
	inc, err := g.prom.Query(ctx, fmt.Sprintf(`sum by (%s, type) (increase(%s{%s}[%s]))`, L, metricXDSRejects, sel, seconds(window)), now)
	if err != nil {
		return fmt.Errorf("config acceptance: %w", err)
	}
	scraped := map[string]bool{}
	for _, s := range present {
		scraped[s.Labels[L]] = true
	}
	type key struct{ rev, typ string }
	atStart := map[key]float64{}
	for _, s := range start {
		atStart[key{s.Labels[L], s.Labels["type"]}] = s.Value
	}
	byKey := map[key]float64{}
	for _, s := range cur {
		k := key{s.Labels[L], s.Labels["type"]}
		byKey[k] = math.Max(byKey[k], s.Value-atStart[k])
		scraped[k.rev] = true
	}
	for _, s := range inc {
		k := key{s.Labels[L], s.Labels["type"]}
		if !math.IsNaN(s.Value) {
			byKey[k] = math.Max(byKey[k], s.Value)
		}
	}
	total := map[string]float64{}
	types := map[string][]string{}
	for k, n := range byKey {
		n = math.Round(n)
		if n <= 0 {
			continue
		}
		total[k.rev] += n
		types[k.rev] = append(types[k.rev], fmt.Sprintf("%s %g", typeName(k.typ), n))
	}
	describe := func(rev string) string {
		t := types[rev]
		sort.Strings(t)
		if len(t) == 1 {
			return "(" + strings.Fields(t[0])[0] + ")"
		}
		return "(" + strings.Join(t, ", ") + ")"
	}
	if !scraped[in.To] {
		res.notes = append(res.notes, fmt.Sprintf("config acceptance: Prometheus has no istiod series of revision %s (%s{component=\"pilot\",%s=%q}): nothing to judge, passed", in.To, metricIstioBuild, L, in.To))
		res.rows = append(res.rows, v1alpha1.JudgementRow{Pod: "istiod revision " + in.To, Metric: MetricXDSRejects, Before: "-", After: "-", Note: "no data in Prometheus"})
		return nil
	}
	old := fmt.Sprintf("%g on %s", total[in.From], in.From)
	if !scraped[in.From] {
		old = "no data on " + in.From
	}
	row := v1alpha1.JudgementRow{Pod: "istiod revision " + in.To, Metric: MetricXDSRejects, Before: old, After: fmt.Sprintf("%g", total[in.To]), P: "-"}
	if total[in.To] > 0 {
		row.After += " " + describe(in.To)
	}
	if total[in.To] > g.cfg.maxRejects {
		row.Regressed = true
		res.fails = append(res.fails, fmt.Sprintf("revision %s: %g xDS rejects %s in the wave's soak, %s", in.To, total[in.To], describe(in.To), old))
	}
	res.rows = append(res.rows, row)
	return nil
}

// typeName shortens a type URL (older istiods label with it) to its xDS name.
func typeName(t string) string {
	switch {
	case t == "":
		return "unknown"
	case strings.HasSuffix(t, ".Listener"):
		return "lds"
	case strings.HasSuffix(t, ".Cluster"):
		return "cds"
	case strings.HasSuffix(t, ".ClusterLoadAssignment"):
		return "eds"
	case strings.HasSuffix(t, ".RouteConfiguration"):
		return "rds"
	}
	return t
}

// sideRates are one side's retries and requests over the soak and the baseline.
type sideRates struct{ retries, requests, baseRetries, baseRequests float64 }

// retryVolume compares the wave's retries per request with the control
// namespaces' over the same interval, each against its own baseline before
// the wave: a difference in differences, so a rise the whole cluster shows
// (a busy dependency, a retry storm elsewhere) moves both sides alike.
func (g *builtInGates) retryVolume(ctx context.Context, in WaveInput, now time.Time, res *builtInResult) error {
	L := g.cfg.namespaceLabel
	all := append(append([]string(nil), in.Namespaces...), in.Control...)
	sel := fmt.Sprintf(`%s=~%s`, L, anyOf(all...))
	soak := seconds(now.Sub(in.ReadyAt))
	base := seconds(g.cfg.baseline)
	wave, ctrl := set(in.Namespaces), set(in.Control)
	var w, c sideRates
	for _, q := range []struct {
		metric, window string
		at             time.Time
		wave, ctrl     *float64
	}{
		{metricRetries, soak, now, &w.retries, &c.retries},
		{metricRequests, soak, now, &w.requests, &c.requests},
		{metricRetries, base, in.Since, &w.baseRetries, &c.baseRetries},
		{metricRequests, base, in.Since, &w.baseRequests, &c.baseRequests},
	} {
		if q.at.IsZero() {
			continue
		}
		samples, err := g.prom.Query(ctx, fmt.Sprintf(`sum by (%s) (increase(%s{%s}[%s]))`, L, q.metric, sel, q.window), q.at)
		if err != nil {
			return fmt.Errorf("retry volume: %w", err)
		}
		for _, s := range samples {
			if math.IsNaN(s.Value) {
				continue
			}
			switch ns := s.Labels[L]; {
			case wave[ns]:
				*q.wave += s.Value
			case ctrl[ns]:
				*q.ctrl += s.Value
			}
		}
	}
	ctrlName := "not-yet-migrated namespaces"
	if in.ControlMigrated {
		ctrlName = "namespaces of earlier waves"
	}
	row := v1alpha1.JudgementRow{Pod: fmt.Sprintf("wave's namespaces (%d) vs %s (%d)", len(in.Namespaces), ctrlName, len(in.Control)), Metric: MetricRetriesPerRequest}
	if w.requests < g.cfg.minRequests {
		what := fmt.Sprintf("%.0f requests from the wave's sidecars in the soak, fewer than %g", w.requests, g.cfg.minRequests)
		if w.requests == 0 {
			what = fmt.Sprintf("Prometheus has no %s of the wave's namespaces in the soak (the sidecars' cluster stats need proxyStatsMatcher)", metricRequests)
		}
		res.notes = append(res.notes, "retry volume: "+what+": nothing to judge, passed")
		row.Before, row.After, row.Note = "-", "-", "no data in Prometheus"
		res.rows = append(res.rows, row)
		return nil
	}
	v := compareRetries(g.cfg, w, c)
	row.Before, row.After, row.Note = v.ref, fmt.Sprintf("%.3g", v.got), v.note
	if v.tested {
		row.P = "-"
	}
	if v.regressed {
		row.Regressed = true
		res.fails = append(res.fails, fmt.Sprintf("retry volume on %s: the wave's namespaces %s, against the %s' %s over the same interval: ×%.1f the control's rise, more than the ×%g allowed",
			in.To, v.wave, ctrlName, v.ctrl, v.ratio, g.cfg.maxRise))
	} else if v.note != "" {
		res.notes = append(res.notes, "retry volume: "+v.note)
	}
	res.rows = append(res.rows, row)
	return nil
}

type retryVerdict struct {
	tested, regressed bool
	got, ratio        float64
	ref, wave, ctrl   string
	note              string
}

// compareRetries is the retry gate's decision, pure. Rates are floored at
// minExcess so that a side with no retries before does not divide by zero
// and a rise from nothing to a trickle is not a large factor.
func compareRetries(cfg builtInConfig, w, c sideRates) retryVerdict {
	rate := func(r, n float64) (float64, bool) {
		if n < cfg.minRequests {
			return 0, false
		}
		return r / n, true
	}
	f := func(x float64) float64 { return math.Max(x, cfg.minExcess) }
	got, _ := rate(w.retries, w.requests)
	wb, haveWB := rate(w.baseRetries, w.baseRequests)
	cs, haveCS := rate(c.retries, c.requests)
	cb, haveCB := rate(c.baseRetries, c.baseRequests)
	v := retryVerdict{got: got, tested: true}
	var expected float64
	switch {
	case haveWB && haveCS && haveCB:
		expected = wb * f(cs) / f(cb)
		v.wave = fmt.Sprintf("%.3g -> %.3g retries per request", wb, got)
		v.ctrl = fmt.Sprintf("%.3g -> %.3g", cb, cs)
		v.ref = fmt.Sprintf("%.3g (%.3g x control's rise %.3g/%.3g)", expected, wb, cs, cb)
	case haveWB:
		expected = wb
		v.wave = fmt.Sprintf("%.3g -> %.3g retries per request", wb, got)
		v.ctrl = "no traffic to compare with"
		v.ref = fmt.Sprintf("%.3g (before the wave)", wb)
		v.note = "no control traffic: the wave is compared with its own baseline only"
	case haveCS:
		expected = cs
		v.wave = fmt.Sprintf("%.3g retries per request", got)
		v.ctrl = fmt.Sprintf("%.3g", cs)
		v.ref = fmt.Sprintf("%.3g (control, same interval)", cs)
		v.note = "no baseline before the wave: compared with the control's level"
	default:
		return retryVerdict{got: got, ref: "-", note: "neither a baseline before the wave nor control traffic to compare with: nothing to judge, passed"}
	}
	v.ratio = f(got) / f(expected)
	v.regressed = v.ratio > cfg.maxRise && got-expected >= cfg.minExcess
	return v
}
