package dashboard

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// The view models: pure functions of the cached objects and the time, so
// the pages are tested in tables and rendered without a request to the API.

type listPage struct {
	Rollouts []rolloutRow
	// HasMigrations is false when this dashboard does not read
	// RevisionMigrations (the orchestrator's, without their controller).
	HasMigrations bool
	// HasClusters: the dashboard reads several clusters (Config.Clusters),
	// shown on /clusters.
	HasClusters bool
	// HasFreshness: the dashboard serves /freshness (Config.Freshness).
	HasFreshness bool
	// MigrationsListed is false until they could be listed (no CRD, no RBAC).
	MigrationsListed bool
	Migrations       []migrationRow
}

type rolloutRow struct {
	Name, Phase, Age, Reason string
	Done, Total, Failed      int32
	InFlight                 int32
	Percent                  int
}

type migrationRow struct {
	Name, From, To, Phase, Age, Reason string
	Wave, Waves                        int
	Percent                            int
}

func buildList(rs []*v1alpha1.NodeRollout, ms []*v1alpha1.RevisionMigration, now time.Time) listPage {
	var p listPage
	for _, nr := range rs {
		c := nr.Status.Counts
		p.Rollouts = append(p.Rollouts, rolloutRow{
			Name: nr.Name, Phase: phaseOr(string(nr.Status.Phase)), Age: age(nr.CreationTimestamp.Time, now), Reason: nr.Status.PhaseReason(),
			Done: c.Done, Total: c.Total, Failed: c.Failed, InFlight: c.InProgress, Percent: percent(int(c.Done+c.Skipped+c.RolledBack), int(c.Total)),
		})
	}
	for _, m := range ms {
		ready := 0
		for _, ns := range m.Status.Namespaces {
			if ns.Phase == v1alpha1.NamespaceReady {
				ready++
			}
		}
		waves := len(m.Status.Waves)
		wave := int(m.Status.CurrentWave) + 1
		if waves == 0 || wave > waves {
			wave = waves
		}
		p.Migrations = append(p.Migrations, migrationRow{
			Name: m.Name, From: m.Spec.From, To: m.Spec.To, Phase: phaseOr(string(m.Status.Phase)), Age: age(m.CreationTimestamp.Time, now), Reason: m.Status.Reason,
			Wave: wave, Waves: waves, Percent: percent(ready, len(m.Status.Namespaces)),
		})
	}
	return p
}

type rolloutPage struct {
	Name, Phase string
	Counts      v1alpha1.RolloutCounts
	Percent     int
	Paused      bool
	Halt        *haltView
	Targets     []v1alpha1.TargetStatus
	// Map is every node; Filters pick the nodes List pages through.
	Map     fleetMap
	Filters []fleetFilter
	List    nodeList
	Query   fleetQuery
	// Failed is why a Failed rollout cannot run ("" in another phase).
	Failed string
	// Omitted counts the nodes a degraded status leaves out.
	Omitted int32
}

// nodeGroup is a run of nodes of one wave and zone, in the planned order.
type nodeGroup struct {
	Wave   int32
	Zone   string
	Canary bool
	Nodes  []nodeRow
}

// nodeRow is one node's line; Verdict is the verdict's first clause (the
// whole of it is the row's title and on the node's page).
type nodeRow struct {
	Rollout, Name, State, Class, Step, InStep, Took, Verdict, FullVerdict, Reason string
	Canary                                                                        bool
}

func buildRollout(nr *v1alpha1.NodeRollout, q fleetQuery, now time.Time) rolloutPage {
	c := nr.Status.Counts
	p := rolloutPage{Name: nr.Name, Phase: phaseOr(string(nr.Status.Phase)), Counts: c, Paused: nr.Spec.Paused, Targets: nr.Status.Targets,
		Percent: percent(int(c.Done+c.Skipped+c.RolledBack), int(c.Total)), Halt: buildHalt(nr)}
	if nr.Status.Phase == v1alpha1.PhaseFailed {
		p.Failed = cmp.Or(nr.Status.PhaseReason(), "no reason recorded")
	}
	if o := nr.Status.Omitted; o != nil {
		p.Omitted = o.Total
	}
	p.Map, p.Filters, p.List = buildFleet(nr.Name, nr.Status.Nodes, q, now)
	p.Query = q
	return p
}

// newNodeRow is n's line in the rollout page's list.
func newNodeRow(rollout string, n *v1alpha1.NodeStatus, now time.Time) nodeRow {
	row := nodeRow{Rollout: rollout, Name: n.Name, State: string(n.State), Class: stateClass(n.State), Verdict: firstClause(n.Verdict), FullVerdict: n.Verdict, Reason: otherReason(n), Canary: n.Canary}
	if inFlight(n.State) {
		row.Step = string(n.State)
		if n.StateSince != nil {
			row.InStep = duration(now.Sub(n.StateSince.Time))
		}
	}
	if n.StartTime != nil {
		end := now
		if n.FinishTime != nil {
			end = n.FinishTime.Time
		}
		row.Took = duration(end.Sub(n.StartTime.Time))
	}
	return row
}

type nodePage struct {
	Rollout, Name, State, Class, Zone, Verdict, Reason string
	Wave                                               int32
	Canary                                             bool
	// Detail is every reason behind the verdict (status.nodes[].detail):
	// the checks that passed, clock notes, where the baseline came from.
	Detail    []string
	Halt      *haltView
	Judgement *judgementView
	Grafana   []link
	Steps     []stepDuration
	// Plots are the judged windows drawn from the agents' history (nil
	// without a judgement); the server reads them, not buildNode.
	Plots *plotsView
}

type stepDuration struct{ Name, Took string }

type link struct{ Label, URL string }

type judgementView struct {
	Outcome, IntervalOutcome, JudgedAt                string
	Judgements, ConsecutiveFailures                   int32
	BaselineSeconds, SoakSeconds                      int32
	PodsCompared, PodsNotCompared, Tests, Regressions int32
	PlannedResets                                     int64
	Node, Pods, Probe                                 []evidenceRow
	Ages                                              []agesRow
	// Enrollment is the node's count of ambient pods in the mesh at the
	// soak's end; EnrollmentPods the ones not enrolled, each with its
	// failed check (docs/enrollment.md).
	Enrollment     string
	EnrollmentPods []string
	TrafficOutcome string
}

// agesRow is one pod's established connections by age, before → after.
type agesRow struct{ Pod, Before, After string }

// agesText reads a persisted connection-age summary in words.
func agesText(c v1alpha1.ConnAges) string {
	if c.Open == 0 {
		return "none open"
	}
	age := func(lower string) string {
		if lower == "0" {
			return "<1 s"
		}
		return "≥" + lower + " s"
	}
	return fmt.Sprintf("%d open, median %s, oldest %s", c.Open, age(c.Median), age(c.Oldest))
}

// evidenceRow is one before→after line, with bar widths (percent of the
// larger of the two) when the numbers were persisted.
type evidenceRow struct {
	Pod, Metric, Before, After, P, Control, Note string
	Regressed, HasBars                           bool
	BeforeBar, AfterBar                          float64
	Change                                       string
}

var metricNames = map[v1alpha1.Metric]string{
	v1alpha1.MetricResetsReceived:  "resets received",
	v1alpha1.MetricResetsSent:      "resets sent",
	v1alpha1.MetricConnectFailures: "failed connects",
	v1alpha1.MetricRetransmits:     "retransmits",
	v1alpha1.MetricConnectLatency:  "connect latency",
	v1alpha1.MetricSRTT:            "smoothed RTT",
}

func metricName(m v1alpha1.Metric) string {
	if n, ok := metricNames[m]; ok {
		return n
	}
	return string(m)
}

// findNode is the rollout's entry for node, or nil.
func findNode(nr *v1alpha1.NodeRollout, node string) *v1alpha1.NodeStatus {
	for i := range nr.Status.Nodes {
		if nr.Status.Nodes[i].Name == node {
			return &nr.Status.Nodes[i]
		}
	}
	return nil
}

func buildNode(nr *v1alpha1.NodeRollout, n *v1alpha1.NodeStatus, grafana string, now time.Time) nodePage {
	p := nodePage{Rollout: nr.Name, Name: n.Name, State: string(n.State), Class: stateClass(n.State), Zone: n.Zone, Wave: n.Wave, Canary: n.Canary,
		Verdict: n.Verdict, Reason: otherReason(n), Detail: n.Detail}
	if h := buildHalt(nr); h != nil && h.Node == n.Name {
		h.Reason = "" // the verdict below says it
		h.Advice = strings.Replace(h.Advice, "The node's page has the judge's before/after table", "The judge's before/after table is below", 1)
		p.Halt = h
	}
	if j := n.Judgement; j != nil {
		outcome, _, _ := strings.Cut(n.Verdict, ":")
		v := &judgementView{Outcome: outcome, IntervalOutcome: string(j.IntervalOutcome), JudgedAt: j.JudgedAt, Judgements: j.Judgements,
			ConsecutiveFailures: j.ConsecutiveFailures, BaselineSeconds: j.BaselineSeconds, SoakSeconds: j.SoakSeconds,
			PodsCompared: j.PodsCompared, PodsNotCompared: j.PodsNotCompared, Tests: j.Tests, Regressions: j.Regressions, PlannedResets: j.PlannedResets,
			Enrollment: j.Enrollment, EnrollmentPods: j.EnrollmentPods, TrafficOutcome: string(j.TrafficOutcome)}
		for _, r := range j.Rows {
			e := evidence(r)
			switch {
			case r.Pod == "":
				v.Node = append(v.Node, e)
			case r.Values != nil && r.Values.Probe:
				v.Probe = append(v.Probe, e)
			default:
				v.Pods = append(v.Pods, e)
			}
		}
		for _, a := range j.PodAges {
			v.Ages = append(v.Ages, agesRow{Pod: a.Pod, Before: agesText(a.Before), After: agesText(a.After)})
		}
		p.Judgement = v
	}
	p.Steps = steps(n, now)
	p.Grafana = grafanaLinks(grafana, n)
	return p
}

func evidence(r v1alpha1.JudgementRow) evidenceRow {
	e := evidenceRow{Pod: r.Pod, Metric: metricName(r.Metric), Before: r.Before, After: r.After, P: r.P, Note: r.Note, Regressed: r.Regressed}
	if e.P == "" {
		e.P = "not tested"
	}
	v := r.Values
	if v == nil {
		return e
	}
	b, errB := strconv.ParseFloat(v.Before, 64)
	a, errA := strconv.ParseFloat(v.After, 64)
	if errA == nil && errB == nil {
		if m := max(a, b); m > 0 {
			e.HasBars, e.BeforeBar, e.AfterBar = true, round1(100*b/m), round1(100*a/m)
		}
		switch {
		case b > 0:
			e.Change = fmt.Sprintf("×%.2g", a/b)
		case a > 0:
			e.Change = "from zero"
		}
	}
	if v.ControlShift != "" {
		switch s, err := strconv.ParseFloat(v.ControlShift, 64); {
		case err != nil:
		case math.IsInf(s, 1):
			e.Control = fmt.Sprintf("rose from zero over %d control pods", v.ControlPods)
		default:
			e.Control = fmt.Sprintf("×%.2g over %d control pods", s, v.ControlPods)
		}
	} else {
		e.Control = "no control group"
	}
	return e
}

// steps are the durations the status keeps for a node: its baseline and
// soak windows (from the judgement), its time in the current step and its
// whole run.
func steps(n *v1alpha1.NodeStatus, now time.Time) []stepDuration {
	var out []stepDuration
	if j := n.Judgement; j != nil {
		out = append(out, stepDuration{"baseline window", duration(time.Duration(j.BaselineSeconds) * time.Second)},
			stepDuration{"soak window", duration(time.Duration(j.SoakSeconds) * time.Second)})
	}
	if inFlight(n.State) && n.StateSince != nil {
		out = append(out, stepDuration{"in " + string(n.State) + " for", duration(now.Sub(n.StateSince.Time))})
	}
	if n.StartTime != nil {
		end, label := now, "running for"
		if n.FinishTime != nil {
			end, label = n.FinishTime.Time, "start to finish"
		}
		out = append(out, stepDuration{label, duration(end.Sub(n.StartTime.Time))})
	}
	return out
}

// grafanaLinks point the node-health dashboard at the node over its
// baseline and soak windows, and the rollouts dashboard at the rollout.
func grafanaLinks(base string, n *v1alpha1.NodeStatus) []link {
	if base == "" {
		return nil
	}
	base = strings.TrimRight(base, "/")
	nodeURL := func(from, to time.Time) string {
		q := url.Values{"var-node": {n.Name}, "from": {strconv.FormatInt(from.UnixMilli(), 10)}, "to": {strconv.FormatInt(to.UnixMilli(), 10)}}
		return base + "/d/nodewise-node-health/?" + q.Encode()
	}
	var out []link
	if j := n.Judgement; j != nil && j.JudgedAt != "" {
		if at, err := time.Parse(time.RFC3339, j.JudgedAt); err == nil {
			soak := time.Duration(j.SoakSeconds) * time.Second
			out = append(out, link{"soak window", nodeURL(at.Add(-soak), at)})
			if n.StartTime != nil {
				start := n.StartTime.Time
				out = append(out, link{"baseline window", nodeURL(start.Add(-time.Duration(j.BaselineSeconds)*time.Second), start)})
			}
		}
	}
	if n.StartTime != nil {
		end := time.Now()
		if n.FinishTime != nil {
			end = n.FinishTime.Time
		}
		out = append(out, link{"the node's whole run", nodeURL(n.StartTime.Add(-5*time.Minute), end.Add(5*time.Minute))})
	}
	return out
}

type migrationPage struct {
	Name, From, To, Tag, Phase, Reason string
	Waves                              []waveView
	Skipped                            []v1alpha1.SkippedNamespace
}

type waveView struct {
	Index                int
	Name, State, ReadyAt string
	Current              bool
	Namespaces           []v1alpha1.NamespaceStatus
	Outcome, JudgedAt    string
	Reasons              []string
	Rows                 []evidenceRow
}

func buildMigration(m *v1alpha1.RevisionMigration) migrationPage {
	p := migrationPage{Name: m.Name, From: m.Spec.From, To: m.Spec.To, Tag: migrationTag(m), Phase: phaseOr(string(m.Status.Phase)), Reason: m.Status.Reason, Skipped: m.Status.Skipped}
	byWave := map[int32][]v1alpha1.NamespaceStatus{}
	for _, ns := range m.Status.Namespaces {
		byWave[ns.Wave] = append(byWave[ns.Wave], ns)
	}
	for i, w := range m.Status.Waves {
		v := waveView{Index: i + 1, Name: w.Name, Current: int32(i) == m.Status.CurrentWave, Namespaces: byWave[int32(i)]}
		switch {
		case w.ReadyAt != nil:
			v.State, v.ReadyAt = "migrated", w.ReadyAt.UTC().Format(time.RFC3339)
		case int32(i) == m.Status.CurrentWave:
			v.State = "migrating"
		case int32(i) < m.Status.CurrentWave:
			v.State = "migrated"
		default:
			v.State = "not yet migrated"
		}
		if j := w.Judgement; j != nil {
			v.Outcome, v.JudgedAt, v.Reasons = j.Outcome, j.JudgedAt, j.Reasons
			for _, r := range j.Rows {
				v.Rows = append(v.Rows, evidence(r))
			}
		}
		p.Waves = append(p.Waves, v)
	}
	return p
}

func migrationTag(m *v1alpha1.RevisionMigration) string {
	if m.Spec.Tag == "" {
		return v1alpha1.DefaultMigrationTag
	}
	return m.Spec.Tag
}

// firstClause is a verdict up to its first "; " (the outcome and its
// first reason).
func firstClause(v string) string {
	if head, _, ok := strings.Cut(v, "; "); ok {
		return head + " …"
	}
	return v
}

// otherReason is the node's reason when it says more than its verdict
// (a gate's reason repeats the verdict).
func otherReason(n *v1alpha1.NodeStatus) string {
	if n.Verdict != "" && strings.Contains(n.Reason, n.Verdict) {
		return ""
	}
	return n.Reason
}

func inFlight(s v1alpha1.NodeState) bool {
	switch s {
	case v1alpha1.NodePending, v1alpha1.NodeDone, v1alpha1.NodeSkipped, v1alpha1.NodeFailed, v1alpha1.NodeRolledBack:
		return false
	}
	return s != ""
}

// stateClass is the CSS class of a node state: its colour on the page.
func stateClass(s v1alpha1.NodeState) string {
	switch {
	case s == v1alpha1.NodeFailed:
		return "bad"
	case s == v1alpha1.NodeDone || s == v1alpha1.NodeRolledBack:
		return "good"
	case s == v1alpha1.NodeSkipped:
		return "muted"
	case inFlight(s):
		return "busy"
	}
	return "idle"
}

func phaseOr(p string) string {
	if p == "" {
		return "Pending"
	}
	return p
}

func percent(n, total int) int {
	if total == 0 {
		return 0
	}
	return 100 * n / total
}

func round1(f float64) float64 { return float64(int(f*10+0.5)) / 10 }

// age is kubectl's way of writing an age: 45s, 12m, 3h, 2d.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration(now.Sub(t))
}

func duration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
