package record

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/health/remote/agenttest"
	"github.com/nodewise/nodewise/health/wire"
)

// skewedAgent is a node agent served over HTTPS (agenttest) whose clock runs
// offset from the orchestrator's: one pod with 600 connections and 10 resets
// every 30 s, and a swap that resets 5,000 connections at once.
type skewedAgent struct {
	rig    *agenttest.Agent
	now    time.Time     // the orchestrator's clock (the true time)
	offset time.Duration // the agent's clock less the orchestrator's
	start  time.Time
	seq    uint64
	noSeq  bool // an older agent: no seq
	frozen bool // serve the last snapshot again, restamped with the agent's clock
	pod    wire.PodCounters
	last   wire.Snapshot
}

func newSkewedAgent(t *testing.T, start time.Time, offset time.Duration) *skewedAgent {
	a := &skewedAgent{rig: agenttest.New(t), now: start, offset: offset, start: start.Add(offset - time.Hour),
		pod: wire.PodCounters{Namespace: "shop", Name: "cart", UID: "u1", Side: wire.SideApp,
			ConnectLatency: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)}, SRTT: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
			ConnAges: make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)}}
	return a
}

// advance moves both clocks on by d with steady traffic.
func (a *skewedAgent) advance(d time.Duration) {
	n := uint64(d / (30 * time.Second))
	a.pod.Connects += 600 * n
	a.pod.ResetsReceived += 10 * n
	a.now = a.now.Add(d)
}

// answer is what the agent serves now.
func (a *skewedAgent) answer() wire.Snapshot {
	if a.frozen {
		s := a.last
		s.Time = a.now.Add(a.offset) // a fresh-looking time on an old snapshot
		return s
	}
	a.seq++
	s := wire.Snapshot{Node: "node-a", Time: a.now.Add(a.offset), StartTime: a.start, Mode: wire.ModeEBPF, Pods: []wire.PodCounters{a.pod}}
	if !a.noSeq {
		s.Seq = a.seq
	}
	a.last = s
	return s
}

// recorder samples the agent through the real client, the orchestrator's
// clock being a.now, and tracks it from now.
func (a *skewedAgent) recorder(t *testing.T) *Recorder {
	t.Helper()
	c, err := remote.NewAgent(remote.AgentConfig{CAFile: a.rig.CAFile, TokenFile: a.rig.TokFile, URLFor: a.rig.URLFor,
		RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	src := health.SnapshotFunc(func(ctx context.Context, node string) (wire.Snapshot, error) {
		s := a.answer()
		a.rig.Set(func() { a.rig.Snap = s })
		return c.Snapshot(ctx, node)
	})
	r, err := NewRecorder(RecorderConfig{Source: src, Every: 30 * time.Second, Now: func() time.Time { return a.now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Track(context.Background(), "node-a"); err != nil {
		t.Fatal(err)
	}
	return r
}

// samples moves on 30 s and samples, n times; before(i) runs before each.
func (a *skewedAgent) samples(t *testing.T, r *Recorder, n int, before func(i int)) {
	t.Helper()
	for i := range n {
		if before != nil {
			before(i)
		}
		a.advance(30 * time.Second)
		if err := r.Sample(context.Background(), "node-a"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecorderPlacesSkewedAgentsOnTheOrchestratorsClock runs a node through
// a five-minute baseline, a swap whose reset spike lands 20 s after it
// started, and a soak, with the agent's clock 30 s behind, 60 s ahead, on
// time, and 30 s behind without a seq (an older agent). The baseline holds
// the eleven samples the orchestrator took in it and never the spike; the
// soak starts at the first sample taken after the soak started; the
// baseline lasts five minutes whatever the agent's clock; the reason says by
// how much the agent's clock was off.
func TestRecorderPlacesSkewedAgentsOnTheOrchestratorsClock(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		offset time.Duration
		noSeq  bool
		reason string
	}{
		{"30s behind", -30 * time.Second, false, "ran up to 30s behind the orchestrator's"},
		{"60s ahead", time.Minute, false, "ran up to 1m0s ahead of the orchestrator's"},
		{"on time", 0, false, ""},
		{"30s behind, no seq", -30 * time.Second, true, "the agent sends no seq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			a := newSkewedAgent(t, t0, tc.offset)
			a.noSeq = tc.noSeq
			r := a.recorder(t)
			a.samples(t, r, 10, nil)
			swap := a.now
			a.advance(20 * time.Second)
			a.pod.ResetsReceived += 5000 // the swap's reset spike
			if err := r.Sample(ctx, "node-a"); err != nil {
				t.Fatal(err)
			}
			a.now = swap.Add(time.Minute)
			soakStart := a.now
			for range 8 {
				if err := r.Sample(ctx, "node-a"); err != nil {
					t.Fatal(err)
				}
				a.advance(30 * time.Second)
			}
			base, soak, err := r.Windows("node-a", t0, swap, soakStart)
			if err != nil {
				t.Fatal(err)
			}
			if len(base) != 11 {
				t.Fatalf("baseline holds %d samples, want the 11 taken in it", len(base))
			}
			if got := base[len(base)-1].Pods[0].ResetsReceived; got != 100 {
				t.Errorf("baseline's last sample has %d resets: the swap's spike (5,000) is in the baseline", got)
			}
			w, err := health.NewWindow(base[0], base[len(base)-1])
			if err != nil {
				t.Fatal(err)
			}
			if w.Duration != 5*time.Minute {
				t.Errorf("baseline window %s, want 5m0s", w.Duration)
			}
			if !soak.Time.Equal(soakStart) || soak.Pods[0].ResetsReceived != 5100 {
				t.Errorf("soak starts at %s with %d resets, want %s with 5100", soak.Time, soak.Pods[0].ResetsReceived, soakStart)
			}
			c := r.Clock("node-a", t0, swap, soakStart)
			if tc.reason == "" {
				if c.Mattered() || c.Skewed != 0 {
					t.Errorf("an agent on time: %+v %q", c, c.Reason())
				}
				return
			}
			if c.Skewed != c.Samples || c.Samples != 20 || c.Misplaced == 0 || !strings.Contains(c.Reason(), tc.reason) {
				t.Errorf("clock %+v: %q, want %q", c, c.Reason(), tc.reason)
			}
		})
	}
}

// TestRecorderRatesIgnoreAClockStep: an agent whose clock steps a minute
// ahead in the middle of the baseline (an NTP correction) must not stretch
// the baseline to six minutes, which would lower every rate by a sixth.
func TestRecorderRatesIgnoreAClockStep(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	a := newSkewedAgent(t, t0, 0)
	r := a.recorder(t)
	a.samples(t, r, 10, func(i int) {
		if i == 4 {
			a.offset = time.Minute
		}
	})
	base, _, err := r.Windows("node-a", t0, a.now, t0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := health.NewWindow(base[0], base[len(base)-1])
	if err != nil {
		t.Fatal(err)
	}
	if len(base) != 11 || w.Duration != 5*time.Minute {
		t.Errorf("%d samples over %s, want 11 over 5m0s", len(base), w.Duration)
	}
	for i := 1; i < len(base); i++ {
		if d := base[i].Time.Sub(base[i-1].Time); d != 30*time.Second {
			t.Errorf("sub-window %d lasts %s, want 30s", i, d)
		}
	}
}

// TestStaleAgentWithAFreshTimeIsNotNew: an agent 60 s ahead stops taking new
// snapshots and serves its last one again, restamped with its clock, so each
// answer's time looks fresh. None is a new sample; the judge, reading the
// current snapshot through the Recorder, sees the last new one as old as it
// is on the orchestrator's clock and fails the node as stale, and the
// reason names the repeated seq.
func TestStaleAgentWithAFreshTimeIsNotNew(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	ctx := context.Background()
	a := newSkewedAgent(t, t0, time.Minute)
	r := a.recorder(t)
	a.samples(t, r, 6, nil)
	a.frozen = true
	frozenAt := a.now
	a.samples(t, r, 4, nil)
	base, _, err := r.Windows("node-a", t0, a.now, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(base) != 7 || base[len(base)-1].Seq != 7 || !base[len(base)-1].Time.Equal(frozenAt) {
		t.Errorf("%d samples, the last seq %d at %s: the repeated answers were taken for new (want 7, seq 7 at %s)",
			len(base), base[len(base)-1].Seq, base[len(base)-1].Time, frozenAt)
	}
	c := r.Clock("node-a", t0, a.now, t0)
	if c.Repeats != 4 || c.RepeatSeq != 7 || !strings.Contains(c.Reason(), "answered 4 times with seq 7 again") {
		t.Errorf("clock %+v: %q", c, c.Reason())
	}

	j, err := health.NewJudge(health.JudgeConfig{Source: r, Now: func() time.Time { return a.now }})
	if err != nil {
		t.Fatal(err)
	}
	v, err := j.Judge(ctx, health.Input{Node: "node-a", Baseline: base[:4], SoakStart: base[4]})
	if err != nil || v.Outcome != health.Fail || !strings.Contains(strings.Join(v.Reasons, "\n"), "is stale: its snapshot is 2m0s old") {
		t.Fatalf("stale agent: %v %s %q", err, v.Outcome, v.Reasons)
	}
	if c := r.Clock("node-a", t0, a.now, t0); c.Repeats != 5 {
		t.Errorf("the judge's read is a repeat too: %d repeats, want 5", c.Repeats)
	}
}

// TestPlaceKeepsTheAgentsDeltas checks the placement rule alone: an agent
// on time keeps its own times; one off by a steady amount keeps its own
// deltas from the first placement; one that steps is placed anew; placed
// times always increase.
func TestPlaceKeepsTheAgentsDeltas(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	snap := func(at time.Time, seq uint64) wire.Snapshot {
		return wire.Snapshot{Node: "n", Time: at, StartTime: t0.Add(-time.Hour), Seq: seq}
	}
	tol := time.Second
	type step struct {
		agent, sent, recv time.Duration // from t0
		wantAt            time.Duration
		skewed            bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"on time, within the tolerance", []step{
			{300 * time.Millisecond, 0, 200 * time.Millisecond, 300 * time.Millisecond, false},
			{30*time.Second + 900*time.Millisecond, 30 * time.Second, 30*time.Second + 100*time.Millisecond, 30*time.Second + 900*time.Millisecond, false},
		}},
		{"a steady 90s ahead keeps its deltas", []step{
			{90 * time.Second, 0, 400 * time.Millisecond, 400 * time.Millisecond, true},
			{120*time.Second + 50*time.Millisecond, 30 * time.Second, 30*time.Second + 400*time.Millisecond, 30*time.Second + 450*time.Millisecond, true},
		}},
		{"a step is placed anew", []step{
			{90 * time.Second, 0, 0, 0, true},
			{150 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second, true},
		}},
		{"answers closer than the tolerance stay in order", []step{
			{900 * time.Millisecond, 0, 0, 900 * time.Millisecond, false},
			{-time.Minute, 100 * time.Millisecond, 200 * time.Millisecond, 901 * time.Millisecond, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prev *sample
			for i, st := range tc.steps {
				s := place(prev, snap(t0.Add(st.agent), uint64(i+1)), t0.Add(st.sent), t0.Add(st.recv), tol)
				if got := s.at.Sub(t0); got != st.wantAt || s.skewed != st.skewed {
					t.Errorf("step %d: placed at %s skewed %v, want %s %v", i, got, s.skewed, st.wantAt, st.skewed)
				}
				prev = &s
			}
		})
	}
	if isNew(snap(t0, 7), snap(t0.Add(time.Hour), 7)) {
		t.Error("seq 7 again with a later time is new")
	}
	if !isNew(snap(t0, 7), snap(t0.Add(-time.Hour), 8)) {
		t.Error("seq 8 with an earlier time (a clock stepped back) is not new")
	}
	if isNew(snap(t0, 0), snap(t0, 0)) || !isNew(snap(t0, 0), snap(t0.Add(time.Second), 0)) {
		t.Error("without a seq, the time tells a new snapshot")
	}
	restarted := snap(t0, 1)
	restarted.StartTime = t0
	if !isNew(snap(t0, 7), restarted) {
		t.Error("a restarted agent's seq 1 is not new")
	}
}
