package judgegate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/record"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/gate"
)

// agent is a scripted node agent: five pods with steady traffic, counters
// advancing one minute per snapshot, and an optional reset regression in one
// pod once the soak begins.
type agent struct {
	mu        sync.Mutex
	node      string
	start, at time.Time
	cum       []wire.PodCounters
	soaking   bool
	regress   bool
	down      bool
	offset    time.Duration    // the agent's clock less the orchestrator's (at)
	reads     int              // snapshots taken
	enroll    *wire.Enrollment // each snapshot's enrollment
}

func newAgent(node string, start time.Time) *agent {
	a := &agent{node: node, start: start, at: start}
	for i := range 5 {
		a.cum = append(a.cum, wire.PodCounters{Namespace: "shop", Name: fmt.Sprintf("p%d", i), UID: fmt.Sprint(i), Side: wire.SideApp,
			ConnectLatency: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
			SRTT:           wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
			ConnAges:       make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)})
		a.cum[i].ConnAges[12] = 4 // 4 open connections aged 120–300 s
	}
	// The probe: the judge requires its evidence on every node.
	probe := a.cum[0]
	probe.Namespace, probe.Name, probe.UID = health.DefaultProbeNamespace, "nodewise-probe-x2k4p", "probe"
	probe.ConnAges = make([]uint64, len(wire.AgeBucketBoundsSeconds)+1) // short requests only
	a.cum = append(a.cum, probe)
	return a
}

// tick advances the agent's counters by one minute of traffic.
func (a *agent) tick() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at = a.at.Add(time.Minute)
	for i := range a.cum {
		c := &a.cum[i]
		c.Connects += 600
		c.Accepts += 600
		r := uint64(30 + 3*(int(a.at.Unix()/60)%3)) // 30–36 resets a minute, gently varying
		if a.soaking && a.regress && i == 2 {
			r *= 4
		}
		c.ResetsReceived += r
		c.ConnectLatency.Buckets[9] += 300
		c.ConnectLatency.Buckets[10] += 300
		c.SRTT.Buckets[8] += 600
	}
}

func (a *agent) Snapshot(context.Context, string) (wire.Snapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reads++
	if a.down {
		return wire.Snapshot{}, errors.New("dial tcp: connection refused")
	}
	s := wire.Snapshot{Node: a.node, Time: a.at.Add(a.offset), StartTime: a.start}
	for _, c := range a.cum {
		c.ConnectLatency.Buckets = append([]uint64(nil), c.ConnectLatency.Buckets...)
		c.SRTT.Buckets = append([]uint64(nil), c.SRTT.Buckets...)
		s.Pods = append(s.Pods, c)
	}
	s.Enrollment = a.enroll
	return s, nil
}

func (a *agent) now() time.Time { a.mu.Lock(); defer a.mu.Unlock(); return a.at }

// fleet is the agents of several nodes, on one clock.
type fleet map[string]*agent

func (f fleet) Snapshot(ctx context.Context, node string) (wire.Snapshot, error) {
	a, ok := f[node]
	if !ok {
		return wire.Snapshot{}, fmt.Errorf("node %s: no such node", node)
	}
	return a.Snapshot(ctx, node)
}

func (f fleet) tick() {
	for _, a := range f {
		a.tick()
	}
}

func (f fleet) soak() {
	for _, a := range f {
		a.mu.Lock()
		a.soaking = true
		a.mu.Unlock()
	}
}

// rig runs the orchestrator's sequence against the gate for w1 alone:
// preflight (Prepare), a ten-minute baseline sampled every minute, the swap,
// the soak, the gate.
func rig(t *testing.T, regress bool, spec v1alpha1.GatesSpec) (*Gate, *agent, gate.GateInput, *int) {
	t.Helper()
	r := rigFleet(t, spec, map[string]bool{"w1": regress}, nil, "")
	return r.gate, r.agents["w1"], r.in, r.sleeps
}

type rigged struct {
	gate   *Gate
	rec    *record.Recorder
	agents fleet
	in     gate.GateInput
	sleeps *int
}

// rigFleet is rig for w1 judged against the control nodes control (in
// scope): every node in regress shows the reset rise in pod p2 from the
// swap on (on a control node: a change the cluster saw, not w1's swap). The
// Recorder samples w1 and its controls each minute, as its Run loop would.
func rigFleet(t *testing.T, spec v1alpha1.GatesSpec, regress map[string]bool, control []string, scope string) rigged {
	t.Helper()
	start := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	f := fleet{}
	for _, n := range append([]string{"w1"}, control...) {
		f[n] = newAgent(n, start)
		f[n].regress = regress[n]
	}
	clock := f["w1"].now
	sleeps := 0
	g, rec := newGate(t, f, &sleeps)
	ctx := context.Background()
	in := gate.GateInput{Node: "w1", BaselineStart: clock(), Spec: spec, Control: control, ControlScope: scope}
	if err := g.Prepare(ctx, gate.PrepareInput{Node: "w1", Control: control}); err != nil {
		t.Fatal(err)
	}
	sampleAll := func() {
		for n := range f {
			if err := rec.Sample(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 10 {
		f.tick()
		sampleAll()
	}
	in.SwapStart = clock()
	f.tick() // the swap
	f.soak()
	in.SoakStart = clock()
	sampleAll()
	for range 5 {
		f.tick()
	}
	in.Now = clock()
	return rigged{gate: g, rec: rec, agents: f, in: in, sleeps: &sleeps}
}

func TestGatePassesHealthyNode(t *testing.T) {
	g, _, in, sleeps := rig(t, false, v1alpha1.GatesSpec{MinNodeConnections: 10})
	v, err := g.Judge(context.Background(), in)
	if err != nil || v.Outcome != health.Pass || *sleeps != 0 || v.Summary == nil || v.Summary.PodsCompared != 6 {
		t.Fatalf("healthy: %v %s %q sleeps %d", err, v.Outcome, v.Reasons, *sleeps)
	}
}

func TestGateFailsRegressionAfterTwoIntervals(t *testing.T) {
	g, _, in, sleeps := rig(t, true, v1alpha1.GatesSpec{})
	v, err := g.Judge(context.Background(), in)
	if err != nil || v.Outcome != health.Fail || *sleeps != 1 || v.Summary.ConsecutiveFailures != 2 {
		t.Fatalf("regression: %v %s %q sleeps %d", err, v.Outcome, v.Reasons, *sleeps)
	}
	if !strings.Contains(strings.Join(v.Reasons, "\n"), "pod shop/p2: resets received") {
		t.Errorf("reasons %q", v.Reasons)
	}
}

// TestGateGoesOnFromThePersistedRound: each Inconclusive round is handed
// to GateInput.Progress, and a successor given it as Previous goes on
// counting: a regression fails at the first interval it judges, so a crash
// loop of the orchestrator cannot keep a failing node from ever reaching
// consecutiveFailures.
func TestGateGoesOnFromThePersistedRound(t *testing.T) {
	g, _, in, _ := rig(t, true, v1alpha1.GatesSpec{})
	var persisted []health.Verdict
	in.Progress = func(_ context.Context, v health.Verdict) error {
		persisted = append(persisted, v)
		return nil
	}
	v, err := g.Judge(context.Background(), in)
	if err != nil || v.Outcome != health.Fail || len(persisted) != 1 || persisted[0].Summary.ConsecutiveFailures != 1 {
		t.Fatalf("first leader: %v %s, persisted %d rounds", err, v.Outcome, len(persisted))
	}

	g2, _, in2, sleeps2 := rig(t, true, v1alpha1.GatesSpec{})
	in2.Previous = persisted[0].Summary // what a successor reads back from status
	v, err = g2.Judge(context.Background(), in2)
	if err != nil || v.Outcome != health.Fail || *sleeps2 != 0 || v.Summary.ConsecutiveFailures != 2 || v.Summary.Judgements != 2 {
		t.Fatalf("successor: %v %s sleeps %d summary %+v, want Fail at its first interval, the second in a row", err, v.Outcome, *sleeps2, v.Summary)
	}
}

func TestGateFailsClosed(t *testing.T) {
	r := rigFleet(t, v1alpha1.GatesSpec{}, nil, nil, "")
	g, a, in := r.gate, r.agents["w1"], r.in
	r.agents["w2"] = newAgent("w2", in.BaselineStart) // answers, but was never prepared
	a.down = true
	if v, err := g.Judge(context.Background(), in); err != nil || v.Outcome != health.Fail || !strings.Contains(v.Reasons[0], "did not answer") {
		t.Errorf("agent down: %v %s %q", err, v.Outcome, v.Reasons)
	}
	a.down = false
	in.Node = "w2"
	if v, _ := g.Judge(context.Background(), in); v.Outcome != health.Fail || !strings.Contains(v.Reasons[0], "never tracked") {
		t.Errorf("untracked node: %s %q", v.Outcome, v.Reasons)
	}
	in.Node, in.SwapStart = "w1", in.BaselineStart
	if v, _ := g.Judge(context.Background(), in); v.Outcome != health.Fail || !strings.Contains(v.Reasons[0], "no baseline window") {
		t.Errorf("no baseline window: %s %q", v.Outcome, v.Reasons)
	}
	in.Spec.Counts = []v1alpha1.CountGate{{Metric: "resets"}}
	if _, err := g.Judge(context.Background(), in); err == nil || !strings.Contains(err.Error(), `unknown metric "resets"`) {
		t.Errorf("bad spec: %v", err)
	}
	if err := g.Prepare(context.Background(), gate.PrepareInput{Node: "w1"}); err != nil {
		t.Fatal(err)
	}
	a.down = true
	if err := g.Prepare(context.Background(), gate.PrepareInput{Node: "w3"}); err == nil || !strings.Contains(err.Error(), "preflight: node agent on w3") {
		t.Errorf("preflight with the agent down: %v", err)
	}
}

// TestGatePlansResetsFromTheZtunnelGrace: the gate takes the old ztunnel's
// grace period the orchestrator persisted (GateInput.ZtunnelGrace). The
// connections older than its drain deadline (grace − 5 s) of the pods that
// stayed on the node through the swap are planned resets, whether the node
// was drained or not (the rig's pods all stay, as DaemonSet pods such as the
// probe stay through a drain); a grace longer than the connections' age
// plans none.
func TestGatePlansResetsFromTheZtunnelGrace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		inPlace bool
		grace   time.Duration
		want    int64
	}{
		{"drained, 30 s grace", false, 30 * time.Second, 20}, // 4 old connections on each of 5 pods
		{"in place, 30 s grace", true, 30 * time.Second, 20},
		{"in place, 10 min grace", true, 10 * time.Minute, 0},
	} {
		g, _, in, _ := rig(t, false, v1alpha1.GatesSpec{MinNodeConnections: 10})
		in.SwappedInPlace, in.ZtunnelGrace = tc.inPlace, tc.grace
		v, err := g.Judge(context.Background(), in)
		if err != nil || v.Summary == nil {
			t.Fatalf("%s: %v %+v", tc.name, err, v)
		}
		if v.Summary.PlannedResets != tc.want || v.Outcome != health.Pass {
			t.Errorf("%s: %s, %d planned resets, want Pass with %d (%q)", tc.name, v.Outcome, v.Summary.PlannedResets, tc.want, v.Reasons)
		}
	}
}

// TestGateJudgesAgainstControlGroup: a reset rise the control nodes show too
// (a change across the cluster, not the swap) fails w1 judged before/after
// alone, and passes once the gate hands the judge the control nodes the
// orchestrator named, with a reason that names the control group. A rise on
// w1 alone still fails with the same controls.
func TestGateJudgesAgainstControlGroup(t *testing.T) {
	spec := v1alpha1.GatesSpec{MinNodeConnections: 10}
	all := map[string]bool{"w1": true, "c1": true, "c2": true}
	ctx := context.Background()

	alone := rigFleet(t, spec, all, nil, "")
	v, err := alone.gate.Judge(ctx, alone.in)
	if err != nil || v.Outcome != health.Fail {
		t.Fatalf("cluster-wide rise, no controls: %v %s %q (the rise must be a regression before/after alone)", err, v.Outcome, v.Reasons)
	}

	r := rigFleet(t, spec, all, []string{"c1", "c2"}, "zone a")
	v, err = r.gate.Judge(ctx, r.in)
	reasons := strings.Join(v.Reasons, "\n")
	if err != nil || v.Outcome != health.Pass || *r.sleeps != 0 {
		t.Fatalf("cluster-wide rise against controls: %v %s %q sleeps %d", err, v.Outcome, v.Reasons, *r.sleeps)
	}
	if !strings.Contains(reasons, "the control group (2 control nodes in zone a) moved the same way") {
		t.Errorf("reasons do not name the control group: %q", v.Reasons)
	}

	own := rigFleet(t, spec, map[string]bool{"w1": true}, []string{"c1", "c2"}, "zone a")
	v, err = own.gate.Judge(ctx, own.in)
	if err != nil || v.Outcome != health.Fail || !strings.Contains(strings.Join(v.Reasons, "\n"), "pod shop/p2: resets received") {
		t.Errorf("rise on w1 alone against steady controls: %v %s %q", err, v.Outcome, v.Reasons)
	}
}

// TestGateWithTheControlGroupSwitchedOff: with gates.controlGroup
// Disabled the same cluster-wide rise fails w1, judged before/after alone,
// the reasons say the control group is switched off (not that none was
// left), and the control nodes named are not read at all.
func TestGateWithTheControlGroupSwitchedOff(t *testing.T) {
	spec := v1alpha1.GatesSpec{MinNodeConnections: 10, ControlGroup: v1alpha1.ControlGroupDisabled}
	r := rigFleet(t, spec, map[string]bool{"w1": true, "c1": true, "c2": true}, []string{"c1", "c2"}, "zone a")
	before := map[string]int{}
	for _, c := range []string{"c1", "c2"} {
		before[c] = r.agents[c].reads
	}
	v, err := r.gate.Judge(context.Background(), r.in)
	reasons := strings.Join(v.Reasons, "\n")
	if err != nil || v.Outcome != health.Fail || !strings.Contains(reasons, "pod shop/p2: resets received") {
		t.Fatalf("cluster-wide rise, control group off: %v %s %q; want Fail on p2's resets", err, v.Outcome, v.Reasons)
	}
	if !strings.Contains(reasons, "the control group is switched off (gates.controlGroup: Disabled): judged before/after alone") ||
		strings.Contains(reasons, "no control nodes") || strings.Contains(reasons, "moved the same way") {
		t.Errorf("reasons do not say the control group is switched off: %q", v.Reasons)
	}
	for _, c := range []string{"c1", "c2"} {
		if got := r.agents[c].reads; got != before[c] {
			t.Errorf("control %s read %d times while judging with the control group off", c, got-before[c])
		}
	}
}

// TestGateLeavesOutControlWithoutSamples: a control node the Recorder holds
// no samples of (the plan gained it after w1's preflight) is left out with a
// reason; the rest of the control group still judges.
func TestGateLeavesOutControlWithoutSamples(t *testing.T) {
	all := map[string]bool{"w1": true, "c1": true}
	r := rigFleet(t, v1alpha1.GatesSpec{MinNodeConnections: 10}, all, []string{"c1"}, "zone a")
	r.agents["c9"] = newAgent("c9", r.in.BaselineStart)
	r.in.Control = []string{"c1", "c9"}
	v, err := r.gate.Judge(context.Background(), r.in)
	reasons := strings.Join(v.Reasons, "\n")
	if err != nil || v.Outcome != health.Pass || !strings.Contains(reasons, "control node c9 left out: not sampled by this process") ||
		!strings.Contains(reasons, "1 control node in zone a") {
		t.Errorf("%v %s %q", err, v.Outcome, v.Reasons)
	}
}

// TestGateSaysWhenEveryControlWasLeftOut: with every named control left
// out, the judgement is before/after alone and says why, not that no node
// was left unswapped.
func TestGateSaysWhenEveryControlWasLeftOut(t *testing.T) {
	r := rigFleet(t, v1alpha1.GatesSpec{MinNodeConnections: 10}, nil, nil, "zone a")
	r.agents["c9"] = newAgent("c9", r.in.BaselineStart)
	r.in.Control = []string{"c9"}
	v, err := r.gate.Judge(context.Background(), r.in)
	reasons := strings.Join(v.Reasons, "\n")
	if err != nil || !strings.Contains(reasons, "no control nodes: all 1 named were left out") || strings.Contains(reasons, "none left unswapped") {
		t.Errorf("%v %s %q", err, v.Outcome, v.Reasons)
	}
}

// TestGateDoneReleasesControls: Done stops sampling a judged node and its
// control nodes, except a control another prepared node still holds;
// preparing a node twice (after a restart) holds its nodes once.
func TestGateDoneReleasesControls(t *testing.T) {
	r := rigFleet(t, v1alpha1.GatesSpec{}, nil, []string{"c1", "c2"}, "zone a")
	ctx := context.Background()
	for _, n := range []string{"w2", "c3"} {
		r.agents[n] = newAgent(n, r.in.BaselineStart)
	}
	for _, in := range []gate.PrepareInput{
		{Node: "w1", Control: []string{"c1", "c2"}}, // again, as after a restart
		{Node: "w2", Control: []string{"c2", "c3"}},
	} {
		if err := r.gate.Prepare(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	tracked := func(n string) bool {
		_, _, err := r.rec.Windows(n, r.in.BaselineStart, r.in.SwapStart, time.Time{})
		return err == nil || !strings.Contains(err.Error(), "never tracked")
	}
	want := func(when string, m map[string]bool) {
		t.Helper()
		for n, w := range m {
			if tracked(n) != w {
				t.Errorf("%s: node %s tracked %v, want %v", when, n, !w, w)
			}
		}
	}
	want("both prepared", map[string]bool{"w1": true, "c1": true, "c2": true, "w2": true, "c3": true})
	r.gate.Done("w1")
	want("w1 done", map[string]bool{"w1": false, "c1": false, "c2": true, "w2": true, "c3": true})
	r.gate.Done("w2")
	want("both done", map[string]bool{"w2": false, "c2": false, "c3": false})
}

// TestGateRefusesGateAddress: a spec.gates.prometheus.address outside the
// cluster's Services fails the node with the reason, and the server gets no
// request; allowed (as --gate-address-allow does), the same gate queries it.
func TestGateRefusesGateAddress(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"scalar","result":[0,"1"]}}`))
	}))
	defer srv.Close()
	spec := v1alpha1.GatesSpec{MinNodeConnections: 10, Prometheus: &v1alpha1.PrometheusGates{Address: srv.URL,
		Queries: []v1alpha1.PrometheusQuery{{Name: "up", Query: "1", FailWhen: v1alpha1.FailBelow, Threshold: "0.5"}}}}
	g, _, in, _ := rig(t, false, spec)
	v, err := g.Judge(context.Background(), in)
	if err != nil || v.Outcome != health.Fail || !strings.Contains(strings.Join(v.Reasons, ";"), `gate address not allowed: host "127.0.0.1"`) || hits.Load() != 0 {
		t.Fatalf("refused address: %v %s %q, %d requests; want Fail naming the host and no request", err, v.Outcome, v.Reasons, hits.Load())
	}
	g, _, in, _ = rig(t, false, spec)
	g.cfg.GateAddresses = remote.AddressPolicy{Allow: []string{"127.0.0.1"}}
	if v, err := g.Judge(context.Background(), in); err != nil || v.Outcome != health.Pass || hits.Load() == 0 {
		t.Fatalf("allowed address: %v %s %q, %d requests", err, v.Outcome, v.Reasons, hits.Load())
	}
}

// TestGateJudgesASkewedAgentOnTheOrchestratorsClock: w1's agent runs 30 s
// behind, and 20 s into the swap the old ztunnel resets 3,000 of pod p2's
// connections. By the agent's clock that sample falls in the baseline, and
// its spike then hides p2's reset rise in the soak. The gate, with the judge
// reading through the Recorder as Build wires it, keeps the spike out of the
// baseline, fails the regression, and says how far the agent's clock was off.
func TestGateJudgesASkewedAgentOnTheOrchestratorsClock(t *testing.T) {
	start := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	a := newAgent("w1", start)
	a.regress, a.offset = true, -30*time.Second
	rec, err := record.NewRecorder(record.RecorderConfig{Source: a, Every: time.Minute, Now: a.now})
	if err != nil {
		t.Fatal(err)
	}
	j, err := health.NewJudge(health.JudgeConfig{Source: rec, Now: a.now})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Judge: j, Recorder: rec, Sleep: func(context.Context, time.Duration) error {
		for range 2 {
			a.tick()
			_ = rec.Sample(context.Background(), "w1")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := gate.GateInput{Node: "w1", BaselineStart: a.now(), Spec: v1alpha1.GatesSpec{MinNodeConnections: 10}}
	if err := g.Prepare(ctx, gate.PrepareInput{Node: "w1"}); err != nil {
		t.Fatal(err)
	}
	sample := func() {
		t.Helper()
		if err := rec.Sample(ctx, "w1"); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		a.tick()
		sample()
	}
	in.SwapStart = a.now()
	a.mu.Lock()
	a.at = a.at.Add(20 * time.Second)
	a.cum[2].ResetsReceived += 3000 // the swap's reset spike
	a.mu.Unlock()
	sample() // the agent stamps it 10 s before the swap started
	a.mu.Lock()
	a.at = a.at.Add(40 * time.Second)
	a.mu.Unlock()
	a.soaking = true
	in.SoakStart = a.now()
	sample()
	for range 5 {
		a.tick()
		sample()
	}
	in.Now = a.now()
	v, err := g.Judge(ctx, in)
	reasons := strings.Join(v.Reasons, "\n")
	if err != nil || v.Outcome != health.Fail || !strings.Contains(reasons, "pod shop/p2: resets received") {
		t.Fatalf("regression behind a skewed clock: %v %s %q", err, v.Outcome, v.Reasons)
	}
	if !strings.Contains(reasons, "agent clock on node w1 ran up to 30s behind the orchestrator's") ||
		!strings.Contains(reasons, "3 that its own clock would have put in another window") {
		t.Errorf("the reasons do not show the skew: %q", v.Reasons)
	}
	if v.Summary == nil || v.Summary.BaselineSeconds != 600 {
		t.Errorf("baseline %+v, want the 600 s the orchestrator sampled", v.Summary)
	}
}

// newGate is a gate over the agents on w1's clock, with a Recorder of its
// own; each of its sleeps counts in sleeps and ticks the next interval's
// traffic.
func newGate(t *testing.T, f fleet, sleeps *int) (*Gate, *record.Recorder) {
	t.Helper()
	clock := f["w1"].now
	rec, err := record.NewRecorder(record.RecorderConfig{Source: f, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	j, err := health.NewJudge(health.JudgeConfig{Source: f, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Judge: j, Recorder: rec, Sleep: func(context.Context, time.Duration) error {
		*sleeps++
		for range 2 { // the next interval's traffic
			f.tick()
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return g, rec
}

// successor is a second gate over the same agents, whose Recorder never
// sampled them: a leader that took over.
func successor(t *testing.T, f fleet) *Gate {
	t.Helper()
	g, _ := newGate(t, f, new(int))
	return g
}

// kept is what the first leader's gate persists: the records at the cordon
// and the ones at the soak's start.
func kept(t *testing.T, r rigged) (atCordon, atSoak gate.Kept) {
	t.Helper()
	ctx := context.Background()
	in := gate.KeepInput{Node: "w1", BaselineStart: r.in.BaselineStart, SwapStart: r.in.SwapStart, Spec: r.in.Spec, Control: r.in.Control}
	atCordon, err := r.gate.Keep(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	in.SoakStart, in.Record, in.Controls = r.in.SoakStart, atCordon.Baseline, atCordon.Controls
	if atSoak, err = r.gate.Keep(ctx, in); err != nil {
		t.Fatal(err)
	}
	in.Record, in.Controls = atSoak.Baseline, atSoak.Controls
	if again, err := r.gate.Keep(ctx, in); err != nil || again != atSoak {
		t.Fatalf("keeping the soak's start again: %v, the records changed: %v", err, again != atSoak)
	}
	return atCordon, atSoak
}

// TestGateJudgesWithItsControlsAfterAHandover: a cluster-wide rise, which
// the control group explains. A successor given the node's record and its
// controls' judges the node against the control group: the same outcome and
// judgement as the leader that sampled them, the control group named as
// before, and a reason saying where the controls came from. Without the
// control record (as before it existed) the successor judges before/after
// alone and fails the node; with one it cannot read it says so, and fails
// it the same.
func TestGateJudgesWithItsControlsAfterAHandover(t *testing.T) {
	spec := v1alpha1.GatesSpec{MinNodeConnections: 10}
	all := map[string]bool{"w1": true, "c1": true, "c2": true}
	ctx := context.Background()
	r := rigFleet(t, spec, all, []string{"c1", "c2"}, "zone a")
	atCordon, atSoak := kept(t, r)
	if atCordon.Controls == "" || atSoak.Controls == "" {
		t.Fatalf("no control record kept: at the cordon %d bytes, at the soak's start %d", len(atCordon.Controls), len(atSoak.Controls))
	}
	c, err := record.DecodeControls(atSoak.Controls)
	if err != nil || len(c.Nodes) != 2 || !soakRecorded(c, r.in.SoakStart) {
		t.Fatalf("control record at the soak's start: %v, %d nodes", err, len(c.Nodes))
	}
	want, err := r.gate.Judge(ctx, r.in)
	if err != nil || want.Outcome != health.Pass || !strings.Contains(strings.Join(want.Reasons, "\n"), "the control group (2 control nodes in zone a) moved the same way") {
		t.Fatalf("the leader that sampled the controls: %v %s %q", err, want.Outcome, want.Reasons)
	}

	in := r.in
	in.Record, in.Controls = atSoak.Baseline, atSoak.Controls
	got, err := successor(t, r.agents).Judge(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	var restored string
	var rest []string
	for _, reason := range got.Reasons {
		switch {
		case strings.HasPrefix(reason, "control group restored from the record"):
			restored = reason
		case !strings.HasPrefix(reason, "baseline restored from the record"):
			rest = append(rest, reason)
		}
	}
	if !strings.Contains(restored, "2 control nodes of 2 recorded, 12 pods of 12 kept") {
		t.Errorf("the successor's reasons do not say where its controls came from: %q", got.Reasons)
	}
	// Where the baseline came from is said differently (the sampler's
	// "baseline of node w1 waited out", the successor's "restored from the
	// record"); every other reason must be the same.
	var wantRest []string
	for _, reason := range want.Reasons {
		if !strings.HasPrefix(reason, "baseline of node ") {
			wantRest = append(wantRest, reason)
		}
	}
	if got.Outcome != want.Outcome || !reflect.DeepEqual(rest, wantRest) || !reflect.DeepEqual(got.Summary, want.Summary) {
		t.Errorf("after the handover: %s %q %+v\nwithout it: %s %q %+v", got.Outcome, rest, got.Summary, want.Outcome, wantRest, want.Summary)
	}

	for name, tc := range map[string]struct{ controls, want string }{
		"no control record":         {"", "control node c1 left out: not sampled by this process over the baseline, and not in the control group's persisted record"},
		"unreadable control record": {atSoak.Controls[:len(atSoak.Controls)/2], "the control group's persisted record cannot be read"},
	} {
		in.Controls = tc.controls
		v, err := successor(t, r.agents).Judge(ctx, in)
		reasons := strings.Join(v.Reasons, "\n")
		if err != nil || v.Outcome != health.Fail || !strings.Contains(reasons, tc.want) || !strings.Contains(reasons, "no control nodes: all 2 named were left out") {
			t.Errorf("%s: %v %s %q, want Fail before/after alone, saying %q", name, err, v.Outcome, v.Reasons, tc.want)
		}
	}
}

// TestGateJudgesFromTheRecordAfterAHandover: a successor whose Recorder
// never saw the node's baseline judges it from the persisted record, on
// its evidence: a healthy node passes, a regression fails, and the verdict
// says where the baseline came from. Without the record it fails closed
// as before.
func TestGateJudgesFromTheRecordAfterAHandover(t *testing.T) {
	for _, regress := range []bool{false, true} {
		r := rigFleet(t, v1alpha1.GatesSpec{}, map[string]bool{"w1": regress}, nil, "")
		_, atSoak := kept(t, r)
		g := successor(t, r.agents)
		in := r.in
		in.Record = atSoak.Baseline
		v, err := g.Judge(context.Background(), in)
		want := health.Pass
		if regress {
			want = health.Fail
		}
		all := strings.Join(v.Reasons, "\n")
		if err != nil || v.Outcome != want || !strings.Contains(all, "baseline restored from the record of the swap at") || !strings.Contains(all, "6 pods of 6 kept") {
			t.Fatalf("regress %v: %v %s %q, want %s from the restored baseline", regress, err, v.Outcome, v.Reasons, want)
		}
		if regress && !strings.Contains(all, "pod shop/p2: resets received") {
			t.Errorf("regression reasons %q", v.Reasons)
		}
		if v.Summary == nil || v.Summary.PodsCompared != 6 {
			t.Errorf("summary %+v, want the 6 pods compared", v.Summary)
		}
		in.Record = ""
		if v, _ := successor(t, r.agents).Judge(context.Background(), in); v.Outcome != health.Fail || !strings.Contains(v.Reasons[0], "never tracked") {
			t.Errorf("no record: %s %q, want the old fail-closed", v.Outcome, v.Reasons)
		}
	}
}

// TestGateFailsClosedOnABadRecord: a record that cannot be read, of
// another attempt, or without the soak's start fails the node, saying why.
func TestGateFailsClosedOnABadRecord(t *testing.T) {
	r := rigFleet(t, v1alpha1.GatesSpec{}, nil, nil, "")
	atCordon, atSoak := kept(t, r)
	for name, tc := range map[string]struct {
		record string
		swap   time.Time
		want   string
	}{
		"corrupt":       {atSoak.Baseline[:len(atSoak.Baseline)/2], r.in.SwapStart, "persisted baseline record cannot be read"},
		"other attempt": {atSoak.Baseline, r.in.SwapStart.Add(time.Hour), "not this attempt's"},
		"no soak start": {atCordon.Baseline, r.in.SwapStart, "holds no sample of the soak's start"},
	} {
		in := r.in
		in.Record, in.SwapStart = tc.record, tc.swap
		v, err := successor(t, r.agents).Judge(context.Background(), in)
		if err != nil || v.Outcome != health.Fail || !strings.Contains(strings.Join(v.Reasons, "\n"), tc.want) {
			t.Errorf("%s: %v %s %q, want Fail with %q", name, err, v.Outcome, v.Reasons, tc.want)
		}
	}
}

// TestSuccessorKeepsTheSoakStart: a successor that took over before the
// soak (mid-swap) records the soak's start over the restored baseline, and
// a third leader judges from that record.
func TestSuccessorKeepsTheSoakStart(t *testing.T) {
	r := rigFleet(t, v1alpha1.GatesSpec{}, nil, nil, "")
	atCordon, _ := kept(t, r)
	in := gate.KeepInput{Node: "w1", BaselineStart: r.in.BaselineStart, SwapStart: r.in.SwapStart, SoakStart: r.in.SoakStart, Record: atCordon.Baseline}
	if _, err := successor(t, r.agents).Keep(context.Background(), gate.KeepInput{Node: "w1", BaselineStart: in.BaselineStart, SwapStart: in.SwapStart, SoakStart: in.SoakStart}); err == nil {
		t.Error("a successor without the record kept a baseline it never saw")
	}
	atSoak, err := successor(t, r.agents).Keep(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := record.DecodeBaseline(atSoak.Baseline)
	if err != nil || dec.SoakStart == nil || dec.Pods != 6 || len(dec.Baseline) != 11 {
		t.Fatalf("the successor's record: %v, soak start %v, %d pods, %d samples", err, dec.SoakStart != nil, dec.Pods, len(dec.Baseline))
	}
	for range 5 {
		r.agents.tick()
	}
	gin := r.in
	gin.Now, gin.Record = r.agents["w1"].now(), atSoak.Baseline
	v, err := successor(t, r.agents).Judge(context.Background(), gin)
	if err != nil || v.Outcome != health.Pass || !strings.Contains(strings.Join(v.Reasons, "\n"), "baseline restored") {
		t.Fatalf("third leader: %v %s %q", err, v.Outcome, v.Reasons)
	}
}

// TestEnrollmentForTheWatchdog: the gate gives the soak's watchdog the
// node's enrollment of its last baseline sample (not a later one) and of a
// sample taken now, a successor leader's gate the one before the swap from
// the node's persisted record; an agent that does not answer is an error,
// not an enrollment.
func TestEnrollmentForTheWatchdog(t *testing.T) {
	start := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	f := fleet{"w1": newAgent("w1", start)}
	a := f["w1"]
	sleeps := 0
	g, rec := newGate(t, f, &sleeps)
	ctx := context.Background()
	pod := func(r wire.EnrollmentResult) *wire.Enrollment {
		return &wire.Enrollment{Pods: []wire.PodEnrollment{{Namespace: "shop", Name: "p1", UID: "1", Result: r}}}
	}
	if err := g.Prepare(ctx, gate.PrepareInput{Node: "w1"}); err != nil {
		t.Fatal(err)
	}
	baselineStart := a.now()
	a.enroll = pod(wire.Enrolled)
	for range 3 {
		a.tick()
		if err := rec.Sample(ctx, "w1"); err != nil {
			t.Fatal(err)
		}
	}
	swapStart := a.now()
	a.tick()
	a.enroll = pod(wire.NotEnrolled)
	before, now, err := g.Enrollment(ctx, "w1", baselineStart, swapStart, "")
	if err != nil {
		t.Fatal(err)
	}
	if before == nil || before.Pods[0].Result != wire.Enrolled || now == nil || now.Pods[0].Result != wire.NotEnrolled {
		t.Fatalf("before %+v, now %+v: want enrolled before the swap, not enrolled now", before, now)
	}
	// A successor leader never sampled the baseline: without the node's
	// persisted record it has no enrollment before the swap (the watchdog
	// then holds nothing); with it, the one this leader saw.
	kept, err := g.Keep(ctx, gate.KeepInput{Node: "w1", BaselineStart: baselineStart, SwapStart: swapStart})
	if err != nil {
		t.Fatal(err)
	}
	if before, _, err := successor(t, f).Enrollment(ctx, "w1", baselineStart, swapStart, ""); err != nil || before != nil {
		t.Fatalf("a successor without the record: before %+v, %v; want none", before, err)
	}
	before, now, err = successor(t, f).Enrollment(ctx, "w1", baselineStart, swapStart, kept.Baseline)
	if err != nil || before == nil || len(before.Pods) != 1 || before.Pods[0].Result != wire.Enrolled || now == nil || now.Pods[0].Result != wire.NotEnrolled {
		t.Fatalf("a successor with the record: before %+v, now %+v, %v; want enrolled before the swap (from the record), not enrolled now", before, now, err)
	}
	if _, _, err := successor(t, f).Enrollment(ctx, "w1", baselineStart, swapStart, "not a record"); err == nil || !strings.Contains(err.Error(), "failing closed") {
		t.Fatalf("a successor with a corrupt record: %v, want an error", err)
	}
	a.down = true
	if _, _, err := g.Enrollment(ctx, "w1", baselineStart, swapStart, ""); err == nil || !strings.Contains(err.Error(), "agent on node w1 did not answer") {
		t.Fatalf("agent down: error %v, want one naming the node", err)
	}
}

// TestGateRecordsTheJudgedWindows: the persisted judgement names the
// windows judged and the control nodes compared with (those with samples,
// the first MaxJudgedControls), which the dashboard plots the agents'
// history over.
func TestGateRecordsTheJudgedWindows(t *testing.T) {
	var control []string
	for i := range v1alpha1.MaxJudgedControls + 2 {
		control = append(control, fmt.Sprintf("c%02d", i+1))
	}
	r := rigFleet(t, v1alpha1.GatesSpec{MinNodeConnections: 10}, nil, control, "zone a")
	r.agents["c00"] = newAgent("c00", r.in.BaselineStart) // named since the preflight: left out
	r.in.Control = append([]string{"c00"}, control...)
	v, err := r.gate.Judge(context.Background(), r.in)
	if err != nil || v.Summary == nil {
		t.Fatalf("%v %s %q", err, v.Outcome, v.Reasons)
	}
	f := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	got := []any{v.Summary.BaselineFrom, v.Summary.SwapAt, v.Summary.SoakFrom, v.Summary.ControlNodes}
	want := []any{f(r.in.BaselineStart), f(r.in.SwapStart), f(r.in.SoakStart), control[:v1alpha1.MaxJudgedControls]}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("windows and controls %q, want %q", got, want)
	}
}
