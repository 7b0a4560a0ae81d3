package worker

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// TestPreflightChecks: preflight halts a node that is gone or not Ready,
// or that the gate cannot prepare; the version skew's own error is passed
// on as it is.
func TestPreflightChecks(t *testing.T) {
	skew := errors.New("kubelet 1.31 too old for istio 1.28")
	for _, tc := range []struct {
		name   string
		setup  func(r *rig, g *judgeGate)
		err    error  // errors.Is
		reason string // the preflight_failed halt's reason
	}{
		{"ready", func(*rig, *judgeGate) {}, nil, ""},
		{"node gone", func(r *rig, _ *judgeGate) { _ = r.c.nodes.Delete(readyNode(node1)) }, nil, "preflight: node no longer exists"},
		{"node not Ready", func(r *rig, _ *judgeGate) {
			n := readyNode(node1)
			n.Status.Conditions = nil
			_ = r.c.nodes.Update(n)
		}, nil, "preflight: node is not Ready"},
		{"skew", func(r *rig, _ *judgeGate) { r.world.skew = skew }, skew, ""},
		{"gate cannot prepare", func(_ *rig, g *judgeGate) { g.prepareErr = errors.New("agent unreachable") }, nil, "preflight: gate: agent unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := passing()
			r := newRig(t, g, &fixture.Clock{T: t0}, nil)
			tc.setup(r, g)
			err := r.preflightChecks(t.Context(), r.nr, r.p, node1)
			switch {
			case tc.reason != "":
				var se *nodestep.StepError
				if !errors.As(err, &se) || se.Halt != nodestep.HaltPreflightFailed || se.Reason != tc.reason {
					t.Errorf("preflightChecks: %v, want a preflight_failed halt %q", err, tc.reason)
				}
			case !errors.Is(err, tc.err):
				t.Errorf("preflightChecks: %v, want %v", err, tc.err)
			}
		})
	}
}

// TestPreflightHaltsThroughTheWorker: a node gone from the cache at its
// preflight, or one the skew check halts, fails with preflight_failed
// before anything is cordoned; a skew that cannot be checked stops the
// worker instead (resumed later), recording no failure.
func TestPreflightHaltsThroughTheWorker(t *testing.T) {
	unchecked := errors.New("control plane version unreadable")
	for _, tc := range []struct {
		name  string
		setup func(r *rig)
		err   error
	}{
		{"node gone", func(r *rig) { _ = r.c.nodes.Delete(readyNode(node1)) }, nil},
		{"skew halts", func(r *rig) { r.world.skew = nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: skew") }, nil},
		{"skew unchecked", func(r *rig) { r.world.skew = unchecked }, unchecked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, passing(), &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
			tc.setup(r)
			err := r.drive(t.Context())
			if !errors.Is(err, tc.err) {
				t.Fatalf("drive: %v, want %v", err, tc.err)
			}
			want := []string{"patch Preflight", "uncordon Failed"}
			if tc.err != nil {
				want = want[:1]
			}
			if got := r.nodes.steps(); !slices.Equal(got, want) {
				t.Errorf("node writes %v, want %v", got, want)
			}
			if halts := r.halts(nodestep.HaltPreflightFailed); (halts == 1) != (tc.err == nil) {
				t.Errorf("preflight halts %v", halts)
			}
		})
	}
}

// brokenWorld is a Fleet that cannot be observed.
type brokenWorld struct{ *world }

func (brokenWorld) Snapshot(*v1alpha1.NodeRollout, model.Policy) (model.Snapshot, error) {
	return model.Snapshot{}, errors.New("cache not synced")
}

// TestUnobservableWorldAndKeeperErrors: when the cluster cannot be
// observed the node gets no control nodes (judged before/after alone), and
// when the gate cannot keep its baseline nothing is persisted; neither
// stops the node.
func TestUnobservableWorldAndKeeperErrors(t *testing.T) {
	g := passing()
	g.keepErr = errors.New("no samples")
	r := newRig(t, g, &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
	r.Fleet = brokenWorld{&world{}}
	if err := r.drive(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(g.prepared) != 1 || g.prepared[0].Control != nil {
		t.Errorf("prepared %+v: want no control nodes", g.prepared)
	}
	in := g.inputs()
	if len(in) != 1 || in[0].Control != nil || in[0].ControlScope != "" || in[0].Record != "" {
		t.Errorf("gate inputs %+v: want no control nodes and no kept record", in)
	}
	if len(g.kept) != 2 {
		t.Errorf("asked to keep %d times, want at the cordon and at the soak", len(g.kept))
	}
	if ns := r.status.node(node1); ns.State != v1alpha1.NodeDone || ns.Baseline != "" {
		t.Errorf("status entry %s baseline %q, want Done with none", ns.State, ns.Baseline)
	}
}

// TestJudgeReadsThePersistedRecord: a node judged after a restart gets
// the judgement persisted in this soak (Previous) but not one from before
// it, and with a history-reading gate a baseline window ending at the swap.
func TestJudgeReadsThePersistedRecord(t *testing.T) {
	swapAt, soakAt := t0.Add(-20*time.Minute), t0.Add(-10*time.Minute)
	for _, tc := range []struct {
		name     string
		judgedAt time.Time
		previous bool
	}{
		{"judged in this soak", soakAt.Add(time.Minute), true},
		{"judged in an earlier attempt", soakAt.Add(-time.Hour), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := passing()
			r := newRig(t, g, &fixture.Clock{T: t0}, nil)
			r.status.st.Nodes = []v1alpha1.NodeStatus{{Name: node1, State: v1alpha1.NodeSoak, Baseline: "kept",
				Judgement: &v1alpha1.NodeJudgement{Judgements: 7, JudgedAt: tc.judgedAt.Format(time.RFC3339)}}}
			rec := nodestep.Record{Step: v1alpha1.NodeSoak, SwapSince: swapAt, SoakSince: soakAt}
			if _, err := r.judge(t.Context(), r.nr, r.p, node1, rec); err != nil {
				t.Fatal(err)
			}
			in := g.inputs()[0]
			if (in.Previous != nil) != tc.previous || in.Record != "kept" || !in.SwapStart.Equal(swapAt) || !in.SoakStart.Equal(soakAt) {
				t.Errorf("gate input %+v: want previous %v, the kept record, the recorded swap and soak", in, tc.previous)
			}
		})
	}
}

// TestBaselineStart: with a gate that reads the agents' history the
// baseline window is the spec's baseline ending at the swap, or the time
// since the preflight when that is longer; otherwise, and before a swap,
// it starts at the preflight.
func TestBaselineStart(t *testing.T) {
	p := model.Policy{Baseline: 5 * time.Minute}
	swapAt := t0.Add(time.Hour)
	plain := gate.GateFunc(func(context.Context, gate.GateInput) (health.Verdict, error) { return health.Verdict{}, nil })
	for _, tc := range []struct {
		name       string
		g          gate.Gate
		preflight  time.Time
		swap, want time.Time
	}{
		{"no history", plain, t0, swapAt, t0},
		{"history, before the swap", &historian{}, t0, time.Time{}, t0},
		{"history, no preflight recorded", &historian{}, time.Time{}, swapAt, swapAt.Add(-5 * time.Minute)},
		{"history, short preflight", &historian{}, swapAt.Add(-time.Minute), swapAt, swapAt.Add(-5 * time.Minute)},
		{"history, long preflight", &historian{}, t0, swapAt, t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := judgedLife{gate: tc.g}
			if got := w.baselineStart(p, tc.preflight, tc.swap); !got.Equal(tc.want) {
				t.Errorf("baselineStart = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWithLiveGates: the gates are taken from the cache only from the
// same rollout (not one deleted or recreated under its name).
func TestWithLiveGates(t *testing.T) {
	r := newRig(t, passing(), &fixture.Clock{T: t0}, nil)
	r.edit(func(nr *v1alpha1.NodeRollout) { nr.Spec.Gates.ControlGroup = v1alpha1.ControlGroupDisabled })
	nr, p := r.withLiveGates(r.nr, r.p)
	if nr == r.nr || nr.Spec.Gates.ControlGroup != v1alpha1.ControlGroupDisabled || !p.NoControlGroup || r.nr.Spec.Gates.ControlGroup != "" {
		t.Errorf("live gates not taken (or written into the caller's rollout): %+v, NoControlGroup %v", nr.Spec.Gates, p.NoControlGroup)
	}
	r.edit(func(nr *v1alpha1.NodeRollout) { nr.UID = "recreated" })
	if nr, _ := r.withLiveGates(r.nr, r.p); nr != r.nr {
		t.Error("gates taken from a rollout recreated under the same name")
	}
	_ = r.Rollouts.Delete(r.nr)
	if nr, _ := r.withLiveGates(r.nr, r.p); nr != r.nr {
		t.Error("gates taken from a deleted rollout")
	}
}

// TestOldPod names the pod a swap deletes: the target's live pod on the
// node not on the newest revision, none once it is, none for a target
// the caches do not hold.
func TestOldPod(t *testing.T) {
	r := newRig(t, passing(), &fixture.Clock{T: t0}, nil)
	cni := model.DefaultTargets[0]
	if got := r.oldPod(cni, node1); got != "istio-cni-node-old-uid" {
		t.Errorf("oldPod = %q, want the old pod's UID", got)
	}
	upgrade(r.c, cni, node1)
	if got := r.oldPod(cni, node1); got != "" {
		t.Errorf("oldPod on an upgraded node = %q, want none", got)
	}
	if got := r.oldPod(v1alpha1.TargetRef{Namespace: "kube-system", Name: "absent"}, node1); got != "" {
		t.Errorf("oldPod of an absent target = %q, want none", got)
	}
}

// TestStatusBehind: only the forward in-flight steps and a passed Done go
// behind; a reason, a halt, a non-pass verdict and the cleanup are written
// before anything goes on.
func TestStatusBehind(t *testing.T) {
	for _, tc := range []struct {
		st      v1alpha1.NodeState
		reason  string
		verdict bool
		halts   bool
		want    bool
	}{
		{v1alpha1.NodeDrain, "", false, false, true},
		{v1alpha1.NodeDone, "", true, false, true},
		{v1alpha1.NodeDone, "aborted after the swap; not gated", false, false, false},
		{v1alpha1.NodeFailed, "gate Fail", true, true, false},
		{v1alpha1.NodeSoak, "", true, false, false},
		{v1alpha1.NodeAbortCleanup, "", false, false, false},
		{v1alpha1.NodePending, "", false, false, false},
		{v1alpha1.NodeSoak, "", false, true, false},
	} {
		if got := statusBehind(tc.st, tc.reason, tc.verdict, tc.halts); got != tc.want {
			t.Errorf("statusBehind(%s, %q, verdict %v, halts %v) = %v, want %v", tc.st, tc.reason, tc.verdict, tc.halts, got, tc.want)
		}
	}
}

// TestRecordVerdict: the entry's verdict is the outcome and the headline
// (the first reason for a gate that sets none), its detail every reason,
// and the judgement the verdict's (none clears an older one).
func TestRecordVerdict(t *testing.T) {
	for _, tc := range []struct {
		v          health.Verdict
		line       string
		judgement  bool
		detailSize int
	}{
		{health.Verdict{Outcome: health.Pass}, "Pass", false, 0},
		{health.Verdict{Outcome: health.Fail, Headline: "probe: resets sent 0/s → 3/s (p<0.001)", Reasons: []string{"enrolled 1/1", "probe: resets sent 0/s → 3/s, p<0.001", "agent clock on node n2 ran 2s behind"},
			Summary: &v1alpha1.NodeJudgement{Regressions: 1}}, "Fail: probe: resets sent 0/s → 3/s (p<0.001)", true, 3},
		{health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"a", "b", "c"}}, "Inconclusive: a (+2 more)", false, 3},
	} {
		ns := v1alpha1.NodeStatus{Verdict: "Fail: older", Detail: []string{"older"}, Judgement: &v1alpha1.NodeJudgement{Judgements: 9}}
		recordVerdict(&ns, tc.v)
		if ns.Verdict != tc.line || len(ns.Detail) != tc.detailSize || (ns.Judgement != nil) != tc.judgement || (tc.judgement && ns.Judgement.Regressions != 1) {
			t.Errorf("recordVerdict(%+v) = %q %q %+v, want %q with %d reasons, judgement %v", tc.v, ns.Verdict, ns.Detail, ns.Judgement, tc.line, tc.detailSize, tc.judgement)
		}
	}
}
