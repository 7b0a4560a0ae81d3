package judgegate

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/record"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/gate"
)

// historyFleet is a fleet whose agents keep every snapshot they take each
// tick, as the node agent's /v1/history does.
type historyFleet struct {
	fleet
	kept map[string][]wire.Snapshot
}

func (h *historyFleet) tick() {
	h.fleet.tick()
	h.record()
}

func (h *historyFleet) record() {
	for n, a := range h.fleet {
		s, _ := a.Snapshot(context.Background(), n)
		h.kept[n] = append(h.kept[n], s)
	}
}

func (h *historyFleet) History(_ context.Context, node string, since time.Time) (wire.History, error) {
	a := h.fleet[node]
	out := wire.History{Node: node, StartTime: a.start, Now: a.now()}
	for _, s := range h.kept[node] {
		if !s.Time.Before(since) && s.StartTime.Equal(a.start) {
			out.Snapshots = append(out.Snapshots, s)
		}
	}
	return out, nil
}

// judgeFromHistory is rigFleet with the baseline read from the agents'
// history: the agents count for ten minutes unobserved, then the node's
// slot starts (Prepare backfills), the swap follows at once, and the
// window is the ten minutes before it, as the orchestrator sets it.
func judgeFromHistory(t *testing.T, regress map[string]bool, control []string) (health.Verdict, *Gate, gate.GateInput) {
	t.Helper()
	start := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	hf := &historyFleet{fleet: fleet{}, kept: map[string][]wire.Snapshot{}}
	for _, n := range append([]string{"w1"}, control...) {
		hf.fleet[n] = newAgent(n, start)
		hf.fleet[n].regress = regress[n]
	}
	hf.record()
	for range 10 {
		hf.tick()
	}
	g, rec := newHistoryGate(t, hf)
	clock := hf.fleet["w1"].now
	ctx := context.Background()
	if err := g.Prepare(ctx, gate.PrepareInput{Node: "w1", Control: control, Baseline: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got := g.CoveredSince(ctx, "w1"); !got.Equal(start) {
		t.Fatalf("covered since %s, want the agent's first snapshot at %s", got, start)
	}
	in := gate.GateInput{Node: "w1", SwapStart: clock(), Spec: v1alpha1.GatesSpec{MinNodeConnections: 10}, Control: control, ControlScope: "zone a"}
	in.BaselineStart = in.SwapStart.Add(-10 * time.Minute)
	hf.fleet.tick() // the swap
	hf.fleet.soak()
	in.SoakStart = clock()
	for n := range hf.fleet {
		if err := rec.Sample(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		hf.fleet.tick()
	}
	in.Now = clock()
	v, err := g.Judge(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	return v, g, in
}

func newHistoryGate(t *testing.T, hf *historyFleet) (*Gate, *record.Recorder) {
	t.Helper()
	clock := hf.fleet["w1"].now
	rec, err := record.NewRecorder(record.RecorderConfig{Source: hf, Every: time.Minute, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	j, err := health.NewJudge(health.JudgeConfig{Source: hf.fleet, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Judge: j, Recorder: rec, Sleep: func(context.Context, time.Duration) error {
		for range 2 {
			hf.fleet.tick()
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return g, rec
}

// TestVerdictFromHistoryEqualsTheWaitedOne: on the same traffic, the
// judge's verdict from a baseline read from the agents' history is the one
// from a baseline waited out and sampled live: outcome, reasons and summary,
// for a healthy node, a regressed one, and against a control group whose
// "before" is read from history too.
func TestVerdictFromHistoryEqualsTheWaitedOne(t *testing.T) {
	for _, tc := range []struct {
		name    string
		regress map[string]bool
		control []string
		want    health.Outcome
	}{
		{"healthy", nil, nil, health.Pass},
		{"regressed", map[string]bool{"w1": true}, nil, health.Fail},
		{"healthy with controls", nil, []string{"w2", "w3"}, health.Pass},
		{"regressed with controls", map[string]bool{"w1": true}, []string{"w2", "w3"}, health.Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rigFleet(t, v1alpha1.GatesSpec{MinNodeConnections: 10}, tc.regress, tc.control, "zone a")
			waited, err := r.gate.Judge(context.Background(), r.in)
			if err != nil {
				t.Fatal(err)
			}
			fromHistory, _, _ := judgeFromHistory(t, tc.regress, tc.control)
			if waited.Outcome != tc.want {
				t.Fatalf("waited baseline: %s %q, want %s", waited.Outcome, waited.Reasons, tc.want)
			}
			// The verdicts differ only in the reason that says where the
			// baseline came from.
			hReasons, hSource := baselineSource(t, fromHistory.Reasons)
			wReasons, wSource := baselineSource(t, waited.Reasons)
			if fromHistory.Outcome != waited.Outcome || !reflect.DeepEqual(hReasons, wReasons) || !reflect.DeepEqual(fromHistory.Summary, waited.Summary) {
				t.Errorf("history: %s %q\nwaited:  %s %q", fromHistory.Outcome, fromHistory.Reasons, waited.Outcome, waited.Reasons)
			}
			if want := "baseline of node w1 from its agent's history: 9m0s of the 10m0s window read back at the slot's start (10 snapshots)"; !strings.HasPrefix(hSource, want) {
				t.Errorf("history baseline's source: %q, want %q", hSource, want)
			}
			if want := "baseline of node w1 waited out: 10m0s of the 10m0s window sampled live (11 samples), none read from its agent's history"; wSource != want {
				t.Errorf("waited baseline's source: %q, want %q", wSource, want)
			}
		})
	}
}

// TestAgentRestartedBeforeTheSlot: an agent restarted a minute before the
// node's slot has one minute of history. The gate says so (CoveredSince is
// the restart, so preflight waits the other nine), and a judgement on a
// window reaching before the restart leaves the older run out and says it
// judged on the shorter baseline: never a silent pass.
func TestAgentRestartedBeforeTheSlot(t *testing.T) {
	start := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	hf := &historyFleet{fleet: fleet{"w1": newAgent("w1", start)}, kept: map[string][]wire.Snapshot{}}
	hf.record()
	for range 9 {
		hf.tick()
	}
	a := hf.fleet["w1"]
	restarted := newAgent("w1", a.now()) // a new process: new start time, counters from zero
	restarted.at = a.now()
	hf.fleet["w1"] = restarted
	hf.record()
	hf.tick()
	g, _ := newHistoryGate(t, hf)
	ctx := context.Background()
	if err := g.Prepare(ctx, gate.PrepareInput{Node: "w1", Baseline: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	since := g.CoveredSince(ctx, "w1")
	if !since.Equal(restarted.start) {
		t.Fatalf("covered since %s, want the restart at %s (the rest of the window is waited for)", since, restarted.start)
	}
	clock := restarted.now
	in := gate.GateInput{Node: "w1", SwapStart: clock(), Spec: v1alpha1.GatesSpec{MinNodeConnections: 10}}
	in.BaselineStart = in.SwapStart.Add(-10 * time.Minute)
	hf.fleet.tick()
	in.SoakStart = clock()
	if err := g.cfg.Recorder.Sample(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		hf.fleet.tick()
	}
	in.Now = clock()
	v, err := g.Judge(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	said := false
	for _, r := range v.Reasons {
		said = said || (strings.Contains(r, "restarted inside the baseline window") && strings.Contains(r, "shorter baseline of 1m0s"))
	}
	if !said {
		t.Errorf("verdict %s does not say the baseline was shortened by the restart: %q", v.Outcome, v.Reasons)
	}
}

// baselineSource splits a verdict's reasons into the others and the one
// that says where the judged node's baseline came from (there must be one).
func baselineSource(t *testing.T, reasons []string) (rest []string, source string) {
	t.Helper()
	for _, r := range reasons {
		if strings.HasPrefix(r, "baseline of node w1 ") {
			if source != "" {
				t.Fatalf("two baseline sources in %q", reasons)
			}
			source = r
			continue
		}
		rest = append(rest, r)
	}
	if source == "" {
		t.Fatalf("no reason says where the baseline came from: %q", reasons)
	}
	return rest, source
}
