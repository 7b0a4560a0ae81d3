package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/leader"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// TestNodeWalksEveryStepToDone drives a node through every step of a
// policy that drains, waits a baseline and soaks: each recorded step is
// written before it acts (the cordon and the uncordon in their step's
// patch), the surge swap after the replace swap has no record of its own
// but shows in status, the swap's record names the old pods it deletes,
// and the node ends Done, schedulable, with the gate's verdict in status
// and the swap records forgotten.
func TestNodeWalksEveryStepToDone(t *testing.T) {
	g := passing()
	r := newRig(t, g, &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
	r.Claims.Claim(rollout, node1)
	if err := r.drive(t.Context()); err != nil {
		t.Fatal(err)
	}

	want := []string{"patch Preflight", "cordon Cordon", "patch Drain", "patch SwapCNI", "uncordon Uncordon", "patch Soak", "patch Done"}
	if got := r.nodes.steps(); !slices.Equal(got, want) {
		t.Fatalf("node writes %v, want %v", got, want)
	}
	shown := []string{"n1 Preflight", "n1 Cordon", "n1 Drain", "n1 SwapCNI", "n1 SwapZtunnel", "n1 Uncordon", "n1 Soak", "n1 Done"}
	if got := r.status.states; !slices.Equal(got, shown) {
		t.Errorf("status showed %v, want %v", got, shown)
	}
	if got := r.drain.count(); got != 1 {
		t.Errorf("drained %d times, want once", got)
	}
	if got := r.replace.calls(); !slices.Equal(got, []string{"istio-cni-node"}) {
		t.Errorf("replaced %v, want [istio-cni-node]", got)
	}
	if got := r.surge.calls(); !slices.Equal(got, []string{"ztunnel"}) {
		t.Errorf("surged %v, want [ztunnel]", got)
	}

	// The records carry the step's facts.
	if rec := r.nodes.recordOf(t, v1alpha1.NodeCordon); rec.SwapSince.IsZero() || rec.CordonedBy != rollout || rec.PriorUnschedulable != "false" {
		t.Errorf("cordon record %+v: want SwapSince stamped and the cordon named ours", rec)
	}
	swapRec := r.nodes.recordOf(t, v1alpha1.NodeSwapCNI)
	if swapRec.Swapped["istio-cni-node"] != "istio-cni-node-old-uid" || swapRec.Swapped["ztunnel"] != "ztunnel-old-uid" {
		t.Errorf("swap record names %v, want the old pods of both targets (ztunnel's surge has no record)", swapRec.Swapped)
	}
	if swapRec.DrainedAt.IsZero() || swapRec.DrainedAt.Before(swapRec.SwapSince) {
		t.Errorf("swap record DrainedAt %v (cordon %v): want the finished drain stamped after the cordon", swapRec.DrainedAt, swapRec.SwapSince)
	}
	if rec := r.nodes.recordOf(t, v1alpha1.NodeSoak); rec.SoakSince.IsZero() {
		t.Errorf("soak record %+v: want SoakSince stamped", rec)
	}

	n := r.nodes.node(node1)
	done := nodestep.ParseRecord(n.Annotations)
	if n.Spec.Unschedulable || done.Step != v1alpha1.NodeDone || done.Swapped != nil || done.CordonedBy != "" || done.PriorUnschedulable != "" {
		t.Errorf("node at the end: unschedulable %v, record %+v; want Done, schedulable, no cordon or swap bookkeeping", n.Spec.Unschedulable, done)
	}

	ns := r.status.node(node1)
	if ns.State != v1alpha1.NodeDone || ns.Verdict != "Pass: no regression" || ns.Judgement == nil || ns.Judgement.Judgements != 3 {
		t.Errorf("status entry %+v: want Done with the gate's verdict and judgement", ns)
	}
	if ns.StartTime == nil || ns.FinishTime == nil || !ns.StartTime.Before(ns.FinishTime) || ns.Baseline != "" || ns.Controls != "" || ns.Reason != "" {
		t.Errorf("status entry %+v: want start and finish times, the baseline and control records cleared, no reason", ns)
	}
	if st := r.status.status(); st.Phase == v1alpha1.PhaseHalted || st.HaltReason != "" {
		t.Errorf("a passed node halted the rollout: %+v", st)
	}

	// The gate was prepared, kept the baseline at the cordon and again at
	// the soak's start, judged once with the drain's facts, and released.
	if len(g.prepared) != 1 || g.prepared[0].Node != node1 || g.prepared[0].Baseline != longTime {
		t.Errorf("prepared %+v, want n1 once with the baseline", g.prepared)
	}
	if len(g.kept) != 2 || !g.kept[0].SoakStart.IsZero() || g.kept[1].SoakStart.IsZero() || g.kept[1].Record != "kept 1" || g.kept[1].Controls != "controls 1" {
		t.Errorf("kept %+v: want the baseline at the cordon, then the soak's start on top of those records", g.kept)
	}
	in := g.inputs()
	if len(in) != 1 {
		t.Fatalf("judged %d times, want once", len(in))
	}
	if in[0].SwappedInPlace || in[0].ZtunnelGrace != ztGrace*time.Second || in[0].Record != "kept 2" || in[0].Controls != "controls 2" || !in[0].SoakStart.Equal(r.nodes.recordOf(t, v1alpha1.NodeSoak).SoakSince) {
		t.Errorf("gate input %+v: want a drained node (not in place), ztunnel's grace %ds, the soak's records and start", in[0], ztGrace)
	}
	if !slices.Equal(g.released, []string{node1}) {
		t.Errorf("released %v, want n1 once it is Done", g.released)
	}
	if r.Claims.Claimed(rollout, node1) {
		t.Error("the planner's claim on n1 outlived its first record")
	}
	if ev := r.recorded(); len(ev) != 0 {
		t.Errorf("a passed node recorded events %v", ev)
	}
}

// TestNoBaselineNoSoakNoDrain: with no baseline, preflight has no record;
// with no drain the cordon's patch records the first swap; with no soak the
// gate judges before the uncordon, and a pass is recorded with it (Done):
// two node writes in all. A failing gate there hands the node back.
func TestNoBaselineNoSoakNoDrain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome health.Outcome
		want    []string
		state   v1alpha1.NodeState
	}{
		{"pass", health.Pass, []string{"cordon SwapCNI", "uncordon Done"}, v1alpha1.NodeDone},
		{"fail", health.Fail, []string{"cordon SwapCNI", "uncordon Failed"}, v1alpha1.NodeFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &judgeGate{verdict: health.Verdict{Outcome: tc.outcome, Reasons: []string{"judged"}}}
			r := newRig(t, g, &fixture.Clock{T: t0}, func(s *v1alpha1.NodeRolloutSpec) {
				s.Baseline, s.Soak, s.Drain.Policy = v1alpha1.DurationOf(0), v1alpha1.DurationOf(0), v1alpha1.DrainNever
			})
			if err := r.drive(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := r.nodes.steps(); !slices.Equal(got, tc.want) {
				t.Fatalf("node writes %v, want %v", got, tc.want)
			}
			if n := r.nodes.node(node1); n.Spec.Unschedulable {
				t.Error("the node was left cordoned")
			}
			if ns := r.status.node(node1); ns.State != tc.state {
				t.Errorf("status %s, want %s", ns.State, tc.state)
			}
			if r.drain.count() != 0 || len(g.prepared) != 1 {
				t.Errorf("drained %d times (policy never), prepared %d times (want once)", r.drain.count(), len(g.prepared))
			}
			if in := g.inputs(); len(in) != 1 || !in[0].SwappedInPlace || !in[0].SoakStart.Equal(in[0].Now) {
				t.Errorf("gate inputs %+v: want one judgement of a node swapped in place, of the present (no soak)", in)
			}
		})
	}
}

// TestGateThatDoesNotPassHalts: a gate's Fail, its Inconclusive at the
// end, and its error (gates fail closed) all fail the node with a
// gate_failed halt: the node's Failed record, the rollout Halted with the
// node's reason in the same status write, the halt counted and told in
// events. After the soak the node was already handed back.
func TestGateThatDoesNotPassHalts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		verdict health.Verdict
		err     error
		reason  string
	}{
		{"fail", health.Verdict{Outcome: health.Fail, Headline: "probe: resets sent 0/s → 3/s (p<0.001)", Reasons: []string{"enrolled 1/1", "probe: resets sent 0/s → 3/s, p<0.001"}}, nil,
			"gate Fail: probe: resets sent 0/s → 3/s (p<0.001)"},
		{"fail without a headline", health.Verdict{Outcome: health.Fail, Reasons: []string{"resets up", "p<0.001"}}, nil, "gate Fail: resets up (+1 more)"},
		{"inconclusive", health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"too little traffic"}}, nil, "gate Inconclusive: too little traffic"},
		{"error", health.Verdict{}, errors.New("prometheus unreachable"), "gate Fail: gate error: prometheus unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &judgeGate{verdict: tc.verdict, err: tc.err}
			r := newRig(t, g, &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
			if err := r.drive(t.Context()); err != nil {
				t.Fatal(err)
			}
			steps := r.nodes.steps()
			if last := steps[len(steps)-1]; last != "patch Failed" {
				t.Fatalf("node writes %v, want the last a Failed record (the node is uncordoned already)", steps)
			}
			ns := r.status.node(node1)
			if ns.State != v1alpha1.NodeFailed || ns.Reason != tc.reason || ns.FinishTime == nil {
				t.Errorf("status entry %+v, want Failed with reason %q", ns, tc.reason)
			}
			if "gate "+ns.Verdict != tc.reason || (tc.err == nil && !slices.Equal(ns.Detail, tc.verdict.Reasons)) {
				t.Errorf("verdict %q, detail %q: want the verdict's line and every reason %q", ns.Verdict, ns.Detail, tc.verdict.Reasons)
			}
			st := r.status.status()
			if st.Phase != v1alpha1.PhaseHalted || st.HaltReason != "node n1: "+tc.reason {
				t.Errorf("rollout phase %s, halt reason %q; want Halted naming the node", st.Phase, st.HaltReason)
			}
			if r.halts(nodestep.HaltGateFailed) != 1 {
				t.Errorf("gate_failed halts counted %v, want 1", r.halts(nodestep.HaltGateFailed))
			}
			ev := r.recorded()
			if len(ev) != 2 || !strings.HasPrefix(ev[0], "Warning Halted rollout halted: node n1: "+tc.reason) || !strings.HasPrefix(ev[1], "Warning NodewiseHalted NodeRollout r halted on this node") {
				t.Errorf("events %q: want the rollout's and the node's halt", ev)
			}
			if !slices.Equal(g.released, []string{node1}) {
				t.Errorf("released %v, want n1 once it failed", g.released)
			}
		})
	}
}

// TestGateRoundsArePersisted: an Inconclusive round a gate reports while it
// holds the node is written to the node's status entry before the verdict.
func TestGateRoundsArePersisted(t *testing.T) {
	g := passing()
	g.progress = true
	r := newRig(t, g, &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
	var seen []string
	r.status.fail = func(after v1alpha1.NodeRolloutStatus) error {
		seen = append(seen, model.NodeEntry(&after, node1).Verdict)
		return nil
	}
	if err := r.drive(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(seen, "Inconclusive: too little traffic") {
		t.Errorf("waited status writes showed verdicts %q, want the Inconclusive round", seen)
	}
	if ns := r.status.node(node1); ns.State != v1alpha1.NodeDone || ns.Verdict != "Pass: no regression" {
		t.Errorf("status entry %+v: want Done with the final verdict", ns)
	}
}

// TestGatesEditedWhileJudgedAreJudgedAgain: an edit of spec.gates reaches a
// node held at its gate: the judgement under the old spec is cut short (no
// verdict, no halt) and the node is judged again under the live spec.
func TestGatesEditedWhileJudgedAreJudgedAgain(t *testing.T) {
	g := passing()
	g.judge = func(ctx context.Context, round int, _ gate.GateInput) (health.Verdict, error) {
		if round == 1 {
			<-ctx.Done() // held Inconclusive until the edit cuts the wait
			return health.Verdict{}, ctx.Err()
		}
		return g.verdict, nil
	}
	r := newRig(t, g, &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
	r.edit(func(live *v1alpha1.NodeRollout) {
		live.Spec.Gates.ConsecutiveFailures = 5
		live.Spec.Gates.ControlGroup = v1alpha1.ControlGroupDisabled
	})
	if err := r.drive(t.Context()); err != nil {
		t.Fatal(err)
	}
	in := g.inputs()
	if len(in) != 2 || in[0].Spec.ConsecutiveFailures != 0 || in[1].Spec.ConsecutiveFailures != 5 {
		t.Fatalf("judged %d times with %+v; want twice, the second under the edited spec.gates", len(in), in)
	}
	if ns := r.status.node(node1); ns.State != v1alpha1.NodeDone {
		t.Errorf("status %s, want Done after the second judgement", ns.State)
	}
}

// TestSwapFailuresHaltAndKeepTheNodeCordoned: a swap the API refuses, a
// swap that times out, and a new pod that never gets Ready (WaitReady
// times out by the fake clock) fail the node with their halt; the node
// stays cordoned for a person to look at.
func TestSwapFailuresHaltAndKeepTheNodeCordoned(t *testing.T) {
	refused := nodestep.Halt(nodestep.HaltSwapFailed, "deleting pod istio-system/istio-cni-node-old on n1: forbidden")
	timedOut := nodestep.Halt(nodestep.HaltSwapTimeout, "ztunnel not Ready within the swap timeout")
	for _, tc := range []struct {
		name   string
		break_ func(r *rig)
		halt   string
		reason string
	}{
		{"replace refused", func(r *rig) { r.replace.err = refused }, nodestep.HaltSwapFailed, refused.Error()},
		{"surge timed out", func(r *rig) { r.surge.err = timedOut }, nodestep.HaltSwapTimeout, timedOut.Error()},
		{"never Ready", func(r *rig) { r.replace.stay = true }, nodestep.HaltSwapTimeout,
			"istio-system/istio-cni-node not Ready on the new revision within the swap timeout 5m0s: pod istio-cni-node-old is on revision old, not new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, passing(), &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
			tc.break_(r)
			if err := r.drive(t.Context()); err != nil {
				t.Fatal(err)
			}
			want := []string{"patch Preflight", "cordon Cordon", "patch Drain", "patch SwapCNI", "patch Failed"}
			if got := r.nodes.steps(); !slices.Equal(got, want) {
				t.Fatalf("node writes %v, want %v", got, want)
			}
			if n := r.nodes.node(node1); !n.Spec.Unschedulable {
				t.Error("a node whose swap failed was uncordoned")
			}
			ns, st := r.status.node(node1), r.status.status()
			if ns.State != v1alpha1.NodeFailed || ns.Reason != tc.reason || st.Phase != v1alpha1.PhaseHalted || st.HaltReason != "node n1: "+tc.reason {
				t.Errorf("status entry %s %q, rollout %s %q; want Failed and Halted with %q", ns.State, ns.Reason, st.Phase, st.HaltReason, tc.reason)
			}
			if r.halts(tc.halt) != 1 {
				t.Errorf("%s halts counted %v, want 1", tc.halt, r.halts(tc.halt))
			}
		})
	}
}

// TestAnEarlierHaltReasonStays: a node failing in a rollout already halted
// by another node does not replace the first halt reason.
func TestAnEarlierHaltReasonStays(t *testing.T) {
	r := newRig(t, passing(), &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
	r.status.st = v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted, HaltReason: "node n0: gate Fail"}
	r.replace.err = nodestep.Halt(nodestep.HaltSwapFailed, "refused")
	if err := r.drive(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := r.status.status(); st.HaltReason != "node n0: gate Fail" || model.NodeEntry(&st, node1).State != v1alpha1.NodeFailed {
		t.Errorf("halt reason %q, n1 %s; want the first reason kept and n1 Failed", st.HaltReason, model.NodeEntry(&st, node1).State)
	}
}

// TestPreflightFailureHandsTheNodeBack: a node that is not Ready at its
// preflight fails with preflight_failed and is handed back (uncordoned in
// the Failed record's patch) before anything was cordoned or swapped.
func TestPreflightFailureHandsTheNodeBack(t *testing.T) {
	r := newRig(t, passing(), &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
	n := readyNode(node1)
	n.Status.Conditions[0].Status = "False"
	_ = r.c.nodes.Update(n)
	if err := r.drive(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, want := r.nodes.steps(), []string{"patch Preflight", "uncordon Failed"}; !slices.Equal(got, want) {
		t.Fatalf("node writes %v, want %v", got, want)
	}
	if ns := r.status.node(node1); ns.State != v1alpha1.NodeFailed || ns.Reason != "preflight: node is not Ready" {
		t.Errorf("status entry %s %q, want Failed: preflight: node is not Ready", ns.State, ns.Reason)
	}
	if r.halts(nodestep.HaltPreflightFailed) != 1 || r.drain.count() != 0 || len(r.replace.calls()) != 0 {
		t.Errorf("halts %v, drains %d, swaps %v: want one preflight halt and nothing acted", r.halts(nodestep.HaltPreflightFailed), r.drain.count(), r.replace.calls())
	}
}

// TestWriteErrorsStopTheWorker: a write of a step's record that fails
// (a 409 conflict, Forbidden, NotFound on the node, the status write that
// must precede the act) stops the worker with the API's error before the
// step acts: the older record wins on resume. An act's own error that is
// not a step error (Forbidden from the drain) also stops it, unrecorded.
func TestWriteErrorsStopTheWorker(t *testing.T) {
	conflict := apierrors.NewConflict(corev1.Resource("nodes"), node1, errors.New("the object has been modified"))
	forbidden := apierrors.NewForbidden(corev1.Resource("nodes"), node1, errors.New("RBAC"))
	notFound := apierrors.NewNotFound(corev1.Resource("nodes"), node1)
	failNode := func(op string, st v1alpha1.NodeState, err error) func(r *rig) {
		return func(r *rig) {
			r.nodes.fail = func(o string, s v1alpha1.NodeState) error {
				if o == op && s == st {
					return err
				}
				return nil
			}
		}
	}
	for _, tc := range []struct {
		name   string
		break_ func(r *rig)
		is     func(error) bool
		last   string // the last node write applied
		drains int
	}{
		{"drain record conflicts", failNode("patch", v1alpha1.NodeDrain, conflict), apierrors.IsConflict, "cordon Cordon", 0},
		{"cordon forbidden", failNode("cordon", v1alpha1.NodeCordon, forbidden), apierrors.IsForbidden, "patch Preflight", 0},
		{"uncordon on a deleted node", failNode("uncordon", v1alpha1.NodeUncordon, notFound), apierrors.IsNotFound, "patch SwapCNI", 1},
		{"status conflicts at the cordon", func(r *rig) {
			r.status.fail = func(after v1alpha1.NodeRolloutStatus) error {
				if model.NodeEntry(&after, node1).State == v1alpha1.NodeCordon {
					return conflict
				}
				return nil
			}
		}, apierrors.IsConflict, "cordon Cordon", 0},
		{"drain forbidden", func(r *rig) { r.drain.err = forbidden }, apierrors.IsForbidden, "patch Drain", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, passing(), &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
			tc.break_(r)
			err := r.drive(t.Context())
			if !tc.is(err) {
				t.Fatalf("drive: %v, want the API's error", err)
			}
			var se *nodestep.StepError
			if errors.As(err, &se) {
				t.Errorf("an API error became a step error: %v", se)
			}
			steps := r.nodes.steps()
			if last := steps[len(steps)-1]; last != tc.last {
				t.Errorf("node writes %v, want the last %q", steps, tc.last)
			}
			if r.drain.count() != tc.drains {
				t.Errorf("drained %d times, want %d", r.drain.count(), tc.drains)
			}
			if st := r.status.status(); st.Phase == v1alpha1.PhaseHalted {
				t.Errorf("an API error halted the rollout: %q", st.HaltReason)
			}
		})
	}
}

// TestResumedStepsActAgain: a successor resumes the recorded step. A
// cordon or uncordon resumed has no record to write: it acts again, and an
// API error there stops the worker; resumed cleanly, the node goes on from
// the step after it.
func TestResumedStepsActAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		at     v1alpha1.NodeState
		failOp string
		err    error
		is     func(error) bool
		want   []string
	}{
		{"cordon", v1alpha1.NodeCordon, "", nil, nil, []string{"cordon Cordon", "patch Drain"}},
		{"cordon NotFound", v1alpha1.NodeCordon, "cordon", apierrors.NewNotFound(corev1.Resource("nodes"), node1), apierrors.IsNotFound, nil},
		{"uncordon", v1alpha1.NodeUncordon, "", nil, nil, []string{"uncordon Uncordon", "patch Soak"}},
		{"uncordon Forbidden", v1alpha1.NodeUncordon, "uncordon", apierrors.NewForbidden(corev1.Resource("nodes"), node1, errors.New("RBAC")), apierrors.IsForbidden, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, passing(), &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
			r.resumeAt(tc.at, t0.Add(-time.Minute), nil)
			r.nodes.fail = func(op string, _ v1alpha1.NodeState) error {
				if op == tc.failOp {
					return tc.err
				}
				return nil
			}
			err := r.drive(t.Context())
			if tc.is != nil {
				if !tc.is(err) || len(r.nodes.steps()) != 0 {
					t.Fatalf("drive: %v, node writes %v; want the API's error and nothing written", err, r.nodes.steps())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.nodes.steps(); len(got) < 2 || !slices.Equal(got[:2], tc.want) {
				t.Errorf("node writes %v, want them to begin %v", got, tc.want)
			}
			if ns := r.status.node(node1); ns.State != v1alpha1.NodeDone {
				t.Errorf("status %s, want Done", ns.State)
			}
		})
	}
}

// TestUnknownRecordStops: a record whose step this version does not know
// stops the worker with that reason, writing nothing.
func TestUnknownRecordStops(t *testing.T) {
	r := newRig(t, passing(), &fixture.Clock{T: t0}, nil)
	r.resumeAt("Reticulate", t0, nil)
	err := r.drive(t.Context())
	if err == nil || !strings.Contains(err.Error(), `unknown persisted step "Reticulate"`) || len(r.nodes.steps()) != 0 {
		t.Fatalf("drive: %v, writes %v; want a stop naming the step, nothing written", err, r.nodes.steps())
	}
}

// TestLeavingBetweenSteps: the user's abort, the rollout's deletion and a
// node relabelled out of spec.nodeSelector are read between steps. Read
// during the drain, the swap that follows still finishes (the node is made
// safe, not left half swapped), nothing after it is judged, and the node
// ends by how far it got; read before the node started, it is handed back
// Pending. A pause is no reason to leave: nodes in flight finish.
func TestLeavingBetweenSteps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*v1alpha1.NodeRollout)
		before  bool // the edit is there before the node starts
		deleted bool
		want    []string
		state   v1alpha1.NodeState
		reason  string
		judged  int
	}{
		{name: "abort during the drain", edit: func(nr *v1alpha1.NodeRollout) { nr.Spec.Abort = true },
			want:  []string{"patch Preflight", "cordon Cordon", "patch Drain", "patch SwapCNI", "patch AbortCleanup", "uncordon Done"},
			state: v1alpha1.NodeDone, reason: "aborted after the swap; not gated"},
		{name: "deleted during the drain", deleted: true,
			want:  []string{"patch Preflight", "cordon Cordon", "patch Drain", "patch SwapCNI", "patch AbortCleanup", "uncordon Done"},
			state: v1alpha1.NodeDone, reason: "NodeRollout deleted after the swap; not gated"},
		{name: "left the selector during the drain", edit: func(nr *v1alpha1.NodeRollout) {
			nr.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "b"}}
		}, want: []string{"patch Preflight", "cordon Cordon", "patch Drain", "patch SwapCNI", "patch AbortCleanup", "uncordon Skipped"},
			state: v1alpha1.NodeSkipped, reason: "left the nodeSelector after the swap; not gated"},
		{name: "aborted before the start", edit: func(nr *v1alpha1.NodeRollout) { nr.Spec.Abort = true }, before: true,
			want: []string{"patch AbortCleanup", "uncordon Pending"}, state: v1alpha1.NodePending, reason: "aborted before the swap"},
		{name: "paused during the drain", edit: func(nr *v1alpha1.NodeRollout) { nr.Spec.Paused = true },
			want:  []string{"patch Preflight", "cordon Cordon", "patch Drain", "patch SwapCNI", "uncordon Uncordon", "patch Soak", "patch Done"},
			state: v1alpha1.NodeDone, judged: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := passing()
			r := newRig(t, g, &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
			change := func() {
				if tc.deleted {
					_ = r.Rollouts.Delete(r.nr)
					return
				}
				r.edit(tc.edit)
			}
			if tc.before {
				change()
			} else {
				r.drain.during = change
			}
			if err := r.drive(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := r.nodes.steps(); !slices.Equal(got, tc.want) {
				t.Fatalf("node writes %v, want %v", got, tc.want)
			}
			ns := r.status.node(node1)
			if ns.State != tc.state || ns.Reason != tc.reason {
				t.Errorf("status entry %s %q, want %s %q", ns.State, ns.Reason, tc.state, tc.reason)
			}
			if n := r.nodes.node(node1); n.Spec.Unschedulable {
				t.Error("the node was left cordoned")
			}
			if len(g.inputs()) != tc.judged {
				t.Errorf("judged %d times, want %d", len(g.inputs()), tc.judged)
			}
			if tc.state == v1alpha1.NodePending && (ns.StartTime != nil || ns.FinishTime != nil || r.drain.count() != 0) {
				t.Errorf("a node handed back Pending kept times %v %v or was drained (%d)", ns.StartTime, ns.FinishTime, r.drain.count())
			}
			if tc.state == v1alpha1.NodeSkipped {
				if ev := r.recorded(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning NodeSkipped node n1 skipped") {
					t.Errorf("events %q, want the skip told", ev)
				}
			}
		})
	}
}

// TestCleanupResumedAfterTheAbortWasWithdrawn: a successor resuming a
// node's AbortCleanup ends it as an abort even though the abort was
// withdrawn meanwhile; a node not on the new revision goes back Pending.
func TestCleanupResumedAfterTheAbortWasWithdrawn(t *testing.T) {
	r := newRig(t, passing(), &fixture.Clock{T: t0}, nil)
	r.resumeAt(v1alpha1.NodeAbortCleanup, t0, func(rec *nodestep.Record) { rec.CordonedBy, rec.PriorUnschedulable = rollout, "false" })
	r.nodes.nodes[node1].Spec.Unschedulable = true
	if err := r.drive(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := r.nodes.steps(); !slices.Equal(got, []string{"uncordon Pending"}) {
		t.Fatalf("node writes %v, want the node handed back Pending", got)
	}
	if ns := r.status.node(node1); ns.Reason != "aborted before the swap" || r.nodes.node(node1).Spec.Unschedulable {
		t.Errorf("status reason %q: want aborted before the swap, and the node uncordoned", ns.Reason)
	}
}

// TestLeaving reads each reason to leave from the caches.
func TestLeaving(t *testing.T) {
	selector := func(l map[string]string) func(*v1alpha1.NodeRollout) {
		return func(nr *v1alpha1.NodeRollout) { nr.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: l} }
	}
	for _, tc := range []struct {
		name string
		edit func(*v1alpha1.NodeRollout) // nil: the rollout is not in the cache
		node string
		want nodestep.Leave
	}{
		{"gone from the cache", nil, node1, nodestep.LeaveDeleting},
		{"recreated under the same name", func(nr *v1alpha1.NodeRollout) { nr.UID = "other" }, node1, nodestep.LeaveDeleting},
		{"being deleted", func(nr *v1alpha1.NodeRollout) { nr.DeletionTimestamp = &metav1.Time{Time: t0} }, node1, nodestep.LeaveDeleting},
		{"aborted", func(nr *v1alpha1.NodeRollout) { nr.Spec.Abort = true }, node1, nodestep.LeaveAbort},
		{"no selector", func(*v1alpha1.NodeRollout) {}, node1, ""},
		{"still selected", selector(map[string]string{"pool": "a"}), node1, ""},
		{"relabelled out", selector(map[string]string{"pool": "b"}), node1, nodestep.LeaveSelector},
		{"node not in the cache", selector(map[string]string{"pool": "b"}), "n9", ""},
		{"invalid selector (the planner's to report)", func(nr *v1alpha1.NodeRollout) {
			nr.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Near"}}}
		}, node1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, passing(), &fixture.Clock{T: t0}, nil)
			if tc.edit == nil {
				_ = r.Rollouts.Delete(r.nr)
			} else {
				r.edit(tc.edit)
			}
			if got := r.Leaving(r.nr, tc.node); got != tc.want {
				t.Errorf("Leaving = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestContextEndsTheWorker: the worker's context ending (the leader
// stepping down, a short deadline) stops it in whatever step waits, with
// the context's error and no record of a failure: the step is resumed. The
// test hook holds it right after a step is persisted or shown.
func TestContextEndsTheWorker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(r *rig, cancel context.CancelFunc)
		clock *fixture.Clock
		is    error
		last  string
	}{
		{"cancelled in the swap", func(r *rig, cancel context.CancelFunc) { r.replace.during, r.replace.hold = cancel, true },
			&fixture.Clock{T: t0, Step: 10 * time.Minute}, context.Canceled, "patch SwapCNI"},
		{"deadline in the soak", func(r *rig, _ context.CancelFunc) {}, &fixture.Clock{T: t0}, context.DeadlineExceeded, "patch Soak"},
		{"held after the drain's record", func(r *rig, _ context.CancelFunc) { r.HoldAfterPersist = v1alpha1.NodeDrain },
			&fixture.Clock{T: t0, Step: 10 * time.Minute}, context.DeadlineExceeded, "patch Drain"},
		{"held as the surge swap begins", func(r *rig, _ context.CancelFunc) { r.HoldAfterPersist = v1alpha1.NodeSwapZtunnel },
			&fixture.Clock{T: t0, Step: 10 * time.Minute}, context.DeadlineExceeded, "patch SwapCNI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A fixed clock waits the soak for real; no baseline keeps the
			// preflight from waiting too.
			r := newRig(t, passing(), tc.clock, func(s *v1alpha1.NodeRolloutSpec) { s.Baseline = v1alpha1.DurationOf(0) })
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			tc.setup(r, cancel)
			err := r.drive(ctx)
			if !errors.Is(err, tc.is) {
				t.Fatalf("drive: %v, want %v", err, tc.is)
			}
			steps := r.nodes.steps()
			if last := steps[len(steps)-1]; last != tc.last {
				t.Errorf("node writes %v, want the last %q", steps, tc.last)
			}
			if st := r.status.status(); st.Phase == v1alpha1.PhaseHalted || model.NodeEntry(&st, node1).State == v1alpha1.NodeFailed {
				t.Errorf("the context's end failed the node: %+v", st)
			}
		})
	}
}

// TestAFencedWriteEndsTheStepQuietly: a replica that no longer holds the
// leader Lease (its fence shut: stopped past its lease) ends the node's
// step where the fence refused it: no halt, no Failed record, nothing in
// status, even when the act turned the refused evictions into a drain
// failure (the drain library keeps only their text). A record a successor
// wrote meanwhile stops the worker too, and stays the successor's.
func TestAFencedWriteEndsTheStepQuietly(t *testing.T) {
	refused := fmt.Errorf("patching node n1: PATCH /api/v1/nodes/n1: %w", leader.ErrNotLeading)
	for _, tc := range []struct {
		name   string
		break_ func(r *rig, shut func())
		is     error
		last   string // the last node write applied
	}{
		{"the evictions refused", func(r *rig, shut func()) {
			r.drain.during = shut
			r.drain.err = nodestep.Halt(nodestep.HaltDrainFailed, "drain: error when evicting pods/%q -n %q: POST: not leading", "app", "default")
		}, leader.ErrNotLeading, "patch Drain"},
		{"the swap's record refused", func(r *rig, shut func()) {
			r.drain.during = shut
			r.nodes.fail = func(_ string, s v1alpha1.NodeState) error {
				if s == v1alpha1.NodeSwapCNI {
					return refused
				}
				return nil
			}
		}, leader.ErrNotLeading, "patch Drain"},
		{"a successor recorded the drain again", func(r *rig, _ func()) {
			r.drain.during = func() {
				r.nodes.mu.Lock()
				defer r.nodes.mu.Unlock()
				succ := nodestep.ParseRecord(r.nodes.nodes[node1].Annotations).WithStep(r.nr.Name, r.nr.UID, v1alpha1.NodeDrain, t0.Add(time.Hour))
				for k, v := range succ.Patch(nodestep.Record{}) {
					r.nodes.nodes[node1].Annotations[k] = *v
				}
			}
		}, nodestep.ErrRecordMoved, "patch Drain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, passing(), &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
			var fence atomic.Pointer[error]
			r.Fence = func() error {
				if e := fence.Load(); e != nil {
					return *e
				}
				return nil
			}
			tc.break_(r, func() { e := error(leader.ErrNotLeading); fence.Store(&e) })
			err := r.drive(t.Context())
			if !errors.Is(err, tc.is) {
				t.Fatalf("drive: %v, want %v", err, tc.is)
			}
			var se *nodestep.StepError
			if errors.As(err, &se) {
				t.Errorf("the step ended as a step error: %v", se)
			}
			steps := r.nodes.steps()
			if last := steps[len(steps)-1]; last != tc.last {
				t.Errorf("node writes %v, want the last %q", steps, tc.last)
			}
			if ns, st := r.status.node(node1), r.status.status(); st.Phase == v1alpha1.PhaseHalted || ns.State == v1alpha1.NodeFailed || ns.Reason != "" {
				t.Errorf("status %s %q, n1 %s %q: want nothing recorded", st.Phase, st.HaltReason, ns.State, ns.Reason)
			}
			if r.halts(nodestep.HaltDrainFailed) != 0 {
				t.Error("a halt was counted")
			}
		})
	}
}
