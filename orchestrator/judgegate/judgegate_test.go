package judgegate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator"
)

// agent is a scripted node agent: five pods with steady traffic, counters
// advancing one minute per snapshot, and an optional reset regression in one
// pod once the soak begins.
type agent struct {
	mu        sync.Mutex
	start, at time.Time
	cum       []health.PodCounters
	soaking   bool
	regress   bool
	down      bool
}

func newAgent(start time.Time) *agent {
	a := &agent{start: start, at: start}
	for i := range 5 {
		a.cum = append(a.cum, health.PodCounters{Namespace: "shop", Name: fmt.Sprintf("p%d", i), UID: fmt.Sprint(i), Side: health.SideApp,
			ConnectLatency: health.Log2Histogram{Buckets: make([]uint64, health.Log2Buckets)},
			SRTT:           health.Log2Histogram{Buckets: make([]uint64, health.Log2Buckets)},
			ConnAges:       make([]uint64, len(health.AgeBucketBoundsSeconds)+1)})
		a.cum[i].ConnAges[12] = 4 // 4 open connections aged 120–300 s
	}
	// The probe: the judge requires its evidence on every node.
	probe := a.cum[0]
	probe.Namespace, probe.Name, probe.UID = health.DefaultProbeNamespace, "nodewise-probe-x2k4p", "probe"
	probe.ConnAges = make([]uint64, len(health.AgeBucketBoundsSeconds)+1) // short requests only
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

func (a *agent) Snapshot(context.Context, string) (health.Snapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down {
		return health.Snapshot{}, errors.New("dial tcp: connection refused")
	}
	s := health.Snapshot{Node: "w1", Time: a.at, StartTime: a.start}
	for _, c := range a.cum {
		c.ConnectLatency.Buckets = append([]uint64(nil), c.ConnectLatency.Buckets...)
		c.SRTT.Buckets = append([]uint64(nil), c.SRTT.Buckets...)
		s.Pods = append(s.Pods, c)
	}
	return s, nil
}

func (a *agent) now() time.Time { a.mu.Lock(); defer a.mu.Unlock(); return a.at }

// rig runs the orchestrator's sequence against the gate: preflight (Prepare),
// a ten-minute baseline sampled every minute, the swap, the soak, the gate.
func rig(t *testing.T, regress bool, spec v1alpha1.GatesSpec) (*Gate, *agent, orchestrator.GateInput, *int) {
	t.Helper()
	a := newAgent(time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC))
	a.regress = regress
	rec, err := health.NewRecorder(health.RecorderConfig{Source: a, Now: a.now})
	if err != nil {
		t.Fatal(err)
	}
	j, err := health.NewJudge(health.JudgeConfig{Source: a, Now: a.now})
	if err != nil {
		t.Fatal(err)
	}
	sleeps := 0
	g, err := New(Config{Judge: j, Recorder: rec, Sleep: func(context.Context, time.Duration) error {
		sleeps++
		for range 2 { // the next interval's traffic
			a.tick()
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := orchestrator.GateInput{Node: "w1", BaselineStart: a.now(), Spec: spec}
	if err := g.Prepare(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		a.tick()
		if err := rec.Sample(ctx, "w1"); err != nil {
			t.Fatal(err)
		}
	}
	in.SwapStart = a.now()
	a.tick() // the swap
	a.soaking = true
	in.SoakStart = a.now()
	if err := rec.Sample(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		a.tick()
	}
	in.Now = a.now()
	return g, a, in, &sleeps
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

func TestGateFailsClosed(t *testing.T) {
	g, a, in, _ := rig(t, false, v1alpha1.GatesSpec{})
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
	if err := g.Prepare(context.Background(), "w1"); err != nil {
		t.Fatal(err)
	}
	a.down = true
	if err := g.Prepare(context.Background(), "w3"); err == nil || !strings.Contains(err.Error(), "preflight: node agent on w3") {
		t.Errorf("preflight with the agent down: %v", err)
	}
}

// TestGateReadsDrainFactsFromGateInput: without Config.Drain the gate takes
// the orchestrator's GateInput.SwappedInPlace and ZtunnelGrace. An in-place
// swap's connections older than ztunnel's drain deadline (grace − 5 s) are
// planned resets; a drained node has none, and a grace longer than the
// connections' age plans none either.
func TestGateReadsDrainFactsFromGateInput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		inPlace bool
		grace   time.Duration
		want    int64
	}{
		{"drained", false, 30 * time.Second, 0},
		{"in place, 30 s grace", true, 30 * time.Second, 20}, // 4 old connections on each of 5 pods
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
