package planner

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

func starts(d Decision) []string {
	var out []string
	for _, a := range d.Actions {
		if a.Kind == ActStart {
			out = append(out, a.Node)
		}
	}
	return out
}

func TestOrderCanariesThenZonesWithRampingWaves(t *testing.T) {
	ns := fixture.Fleet(3, 5)
	plan, missing := Order(ns, []string{"zone-c-04", "zone-a-02"}, 4)
	if len(missing) != 0 {
		t.Fatalf("missing %v", missing)
	}
	var got []string
	for _, p := range plan {
		got = append(got, fmt.Sprintf("%d:%s", p.Wave, p.Name))
	}
	want := []string{
		"1:zone-c-04", "2:zone-a-02", // canaries, one wave each, in the order given
		"3:zone-a-00", "4:zone-a-01", "4:zone-a-03", "5:zone-a-04", // ramp 1,2, then cut at the zone boundary
		"6:zone-b-00", "6:zone-b-01", "6:zone-b-02", "6:zone-b-03", "7:zone-b-04", // maxParallel 4
		"8:zone-c-00", "8:zone-c-01", "8:zone-c-02", "8:zone-c-03",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order\n got %v\nwant %v", got, want)
	}
	if _, missing := Order(ns, []string{"nope"}, 1); !reflect.DeepEqual(missing, []string{"nope"}) {
		t.Fatalf("missing canary not reported: %v", missing)
	}
}

func TestPlan(t *testing.T) {
	monday10 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC) // a Monday
	cases := []struct {
		name      string
		spec      func(*v1alpha1.NodeRolloutSpec)
		world     func(ns []model.NodeView) []model.NodeView
		targets   []model.TargetView
		status    v1alpha1.NodeRolloutStatus
		now       time.Time
		wantPhase v1alpha1.RolloutPhase
		wantStart []string
		reason    string // substring of Decision.Reason
	}{
		{
			name:      "canary first, alone",
			spec:      func(s *v1alpha1.NodeRolloutSpec) { s.CanaryNodes = []string{"zone-b-01"} },
			wantPhase: v1alpha1.PhaseProgressing, wantStart: []string{"zone-b-01"},
		},
		{
			name: "second wave waits for the first to finish",
			world: func(ns []model.NodeView) []model.NodeView {
				fixture.SetState(ns, "zone-a-00", v1alpha1.NodeSoak)
				return ns
			},
			wantPhase: v1alpha1.PhaseProgressing, wantStart: nil,
		},
		{
			name: "after wave 1 (1 node) wave 2 starts two nodes",
			world: func(ns []model.NodeView) []model.NodeView {
				fixture.SetState(ns, "zone-a-00", v1alpha1.NodeDone)
				fixture.Upgrade(ns, "zone-a-00")
				return ns
			},
			wantPhase: v1alpha1.PhaseProgressing, wantStart: []string{"zone-a-01", "zone-a-02"},
		},
		{
			name: "maxUnavailable caps a wave",
			spec: func(s *v1alpha1.NodeRolloutSpec) { s.MaxUnavailable = intstr.FromInt32(1) },
			world: func(ns []model.NodeView) []model.NodeView {
				fixture.SetState(ns, "zone-a-00", v1alpha1.NodeDone)
				fixture.Upgrade(ns, "zone-a-00")
				return ns
			},
			wantPhase: v1alpha1.PhaseProgressing, wantStart: []string{"zone-a-01"},
		},
		{
			name: "in-flight nodes use the maxUnavailable budget",
			spec: func(s *v1alpha1.NodeRolloutSpec) { s.MaxUnavailable = intstr.FromInt32(2) },
			world: func(ns []model.NodeView) []model.NodeView {
				fixture.SetState(ns, "zone-a-00", v1alpha1.NodeDone)
				fixture.Upgrade(ns, "zone-a-00")
				fixture.SetState(ns, "zone-a-01", v1alpha1.NodeWaitReady)
				fixture.SetState(ns, "zone-a-02", v1alpha1.NodeCordon)
				return ns
			},
			wantPhase: v1alpha1.PhaseProgressing, wantStart: nil,
		},
		{
			name: "a failed node halts and nothing new starts",
			world: func(ns []model.NodeView) []model.NodeView {
				fixture.SetState(ns, "zone-a-00", v1alpha1.NodeFailed)
				return ns
			},
			wantPhase: v1alpha1.PhaseHalted, wantStart: nil, reason: "zone-a-00",
		},
		{
			name:      "a persisted halt is never resumed automatically",
			status:    v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted, HaltReason: "gate failed on zone-a-00"},
			wantPhase: v1alpha1.PhaseHalted, wantStart: nil, reason: "gate failed",
		},
		{
			name:      "paused starts nothing",
			spec:      func(s *v1alpha1.NodeRolloutSpec) { s.Paused = true },
			wantPhase: v1alpha1.PhasePaused, wantStart: nil,
		},
		{
			name: "outside every window: nothing starts, next opening given",
			spec: func(s *v1alpha1.NodeRolloutSpec) {
				s.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Days: []v1alpha1.Weekday{"Tue"}, Start: "02:00", End: "04:00", TimeZone: "Europe/Berlin"}}
			},
			now:       monday10,
			wantPhase: v1alpha1.PhaseWaitingForWindow, wantStart: nil, reason: "2026-12-01T01:00:00Z",
		},
		{
			name: "outside the window an in-flight node still finishes",
			spec: func(s *v1alpha1.NodeRolloutSpec) {
				s.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Start: "02:00", End: "04:00"}}
			},
			world: func(ns []model.NodeView) []model.NodeView {
				fixture.SetState(ns, "zone-a-00", v1alpha1.NodeDrain)
				return ns
			},
			now:       monday10,
			wantPhase: v1alpha1.PhaseProgressing, wantStart: nil, reason: "finishing 1 in-flight",
		},
		{
			name: "inside a window (Berlin 11:00 = 10:00 UTC) nodes start",
			spec: func(s *v1alpha1.NodeRolloutSpec) {
				s.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Days: []v1alpha1.Weekday{"Mon"}, Start: "10:30", End: "11:30", TimeZone: "Europe/Berlin"}}
			},
			now:       monday10,
			wantPhase: v1alpha1.PhaseProgressing, wantStart: []string{"zone-a-00"},
		},
		{
			name:      "RollingUpdate target is refused naming the Helm value",
			targets:   fixture.Targets(appsv1.RollingUpdateDaemonSetStrategyType),
			wantPhase: v1alpha1.PhasePending, wantStart: nil, reason: "updateStrategy.type=OnDelete",
		},
		{
			name:      "unknown DaemonSet",
			targets:   []model.TargetView{{Ref: v1alpha1.TargetRef{Namespace: "istio-system", Name: "nope"}}},
			wantPhase: v1alpha1.PhasePending, wantStart: nil, reason: "istio-system/nope not found",
		},
		{
			name: "a template the DaemonSet controller has not observed: nothing starts, nothing is done",
			world: func(ns []model.NodeView) []model.NodeView {
				fixture.Upgrade(ns, "zone-a-00")
				return ns
			},
			targets: func() []model.TargetView {
				ts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
				ts[1].Settled = false
				return ts
			}(),
			wantPhase: v1alpha1.PhaseProgressing, wantStart: nil, reason: "waiting for the DaemonSet controller",
		},
		{
			name: "a DaemonSet just created, with no ControllerRevision yet, is waited for, not refused",
			targets: func() []model.TargetView {
				ts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
				ts[0].NewestHash, ts[0].Settled = "", false
				return ts
			}(),
			wantPhase: v1alpha1.PhaseProgressing, wantStart: nil, reason: "waiting for the DaemonSet controller",
		},
		{
			name: "a node already on the newest revision is done, not swapped",
			world: func(ns []model.NodeView) []model.NodeView {
				fixture.Upgrade(ns, "zone-a-00")
				return ns
			},
			wantPhase: v1alpha1.PhaseProgressing, wantStart: []string{"zone-a-01", "zone-a-02"},
		},
		{
			name: "a pod on the new revision but not Ready is not done",
			world: func(ns []model.NodeView) []model.NodeView {
				fixture.Upgrade(ns, "zone-a-00")
				p := ns[0].Pods["istio-system/ztunnel"]
				p.Ready = false
				ns[0].Pods["istio-system/ztunnel"] = p
				return ns
			},
			wantPhase: v1alpha1.PhaseProgressing, wantStart: []string{"zone-a-00"},
		},
		{
			name: "all nodes on the newest revision completes",
			world: func(ns []model.NodeView) []model.NodeView {
				for _, n := range ns {
					fixture.Upgrade(ns, n.Name)
				}
				return ns
			},
			wantPhase: v1alpha1.PhaseCompleted, wantStart: nil,
		},
		{
			name: "node selector limits the rollout",
			spec: func(s *v1alpha1.NodeRolloutSpec) {
				s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{model.LabelZone: "zone-b"}}
			},
			wantPhase: v1alpha1.PhaseProgressing, wantStart: []string{"zone-b-00"},
		},
		{
			name:      "abort starts nothing",
			spec:      func(s *v1alpha1.NodeRolloutSpec) { s.Abort = true },
			wantPhase: v1alpha1.PhaseAborted, wantStart: nil,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := fixture.Fleet(3, 4)
			if tc.world != nil {
				ns = tc.world(ns)
			}
			ts := tc.targets
			if ts == nil {
				ts = fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
			}
			now := tc.now
			if now.IsZero() {
				now = monday10
			}
			d := Plan(model.Snapshot{Nodes: ns, Targets: ts, Status: tc.status}, fixture.Policy(t, tc.spec), now)
			if d.Phase != tc.wantPhase {
				t.Errorf("phase %s (%s), want %s", d.Phase, d.Reason, tc.wantPhase)
			}
			if got := starts(d); !reflect.DeepEqual(got, tc.wantStart) {
				t.Errorf("starts %v, want %v", got, tc.wantStart)
			}
			if !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("reason %q does not mention %q", d.Reason, tc.reason)
			}
		})
	}
}

func TestPlanResumesInFlightEvenWhenHalted(t *testing.T) {
	ns := fixture.Fleet(1, 3)
	fixture.SetState(ns, "zone-a-00", v1alpha1.NodeFailed)
	fixture.SetState(ns, "zone-a-01", v1alpha1.NodeUncordon)
	d := Plan(model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}, fixture.Policy(t, nil), time.Now())
	if d.Phase != v1alpha1.PhaseHalted {
		t.Fatalf("phase %s", d.Phase)
	}
	if len(d.Actions) != 1 || d.Actions[0].Kind != ActResume || d.Actions[0].Node != "zone-a-01" {
		t.Fatalf("actions %+v, want only Resume zone-a-01", d.Actions)
	}
	d = Plan(model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType), ResumeRequested: true}, fixture.Policy(t, nil), time.Now())
	if d.Phase != v1alpha1.PhaseProgressing || d.Actions[len(d.Actions)-1] != (Action{Kind: ActRetry, Node: "zone-a-00", Reason: "halt cleared by resume"}) {
		t.Fatalf("resume: %s %+v", d.Phase, d.Actions)
	}
}

func TestPlanRollbackReverseOrderAfterTemplateRestored(t *testing.T) {
	ns := fixture.Fleet(1, 4)
	for _, n := range ns[:3] { // three nodes were upgraded to "new222"
		fixture.SetState(ns, n.Name, v1alpha1.NodeDone)
		fixture.Upgrade(ns, n.Name)
	}
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.Rollback = true
		s.MaxParallel = intstr.FromInt32(2)
		s.MaxUnavailable = intstr.FromInt32(2)
	})
	status := v1alpha1.NodeRolloutStatus{Targets: []v1alpha1.TargetStatus{{Namespace: "istio-system", Name: "istio-cni-node", Revision: fixture.NewHash}, {Namespace: "istio-system", Name: "ztunnel", Revision: fixture.NewHash}}}
	d := Plan(model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType), Status: status}, p, time.Now())
	if d.Phase != v1alpha1.PhaseRollingBack || len(d.Actions) != 0 || !strings.Contains(d.Reason, "re-apply the previous chart") {
		t.Fatalf("template not restored yet: %s %q %+v", d.Phase, d.Reason, d.Actions)
	}
	restored := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	for i := range restored {
		restored[i].NewestHash = fixture.OldHash
	}
	d = Plan(model.Snapshot{Nodes: ns, Targets: restored, Status: status}, p, time.Now())
	var got []string
	for _, a := range d.Actions {
		got = append(got, string(a.Kind)+":"+a.Node)
	}
	want := []string{"Rollback:zone-a-02", "Rollback:zone-a-01"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rollback actions %v, want %v", got, want)
	}
}

func TestOrderWindowsSlideOnceTheRampIsFull(t *testing.T) {
	ns := fixture.Fleet(3, 5)
	plan, _ := Order(ns, []string{"zone-c-04"}, 2)
	var got []string
	for _, p := range plan {
		got = append(got, fmt.Sprintf("%d/%d:%s", p.Wave, p.Window, p.Name))
	}
	want := []string{
		"1/1:zone-c-04",                                                    // a canary is a barrier
		"2/2:zone-a-00",                                                    // ramp wave of 1: a barrier
		"3/3:zone-a-01", "3/3:zone-a-02", "4/3:zone-a-03", "4/3:zone-a-04", // full size: one sliding window for the rest of the zone
		"5/4:zone-b-00", "5/4:zone-b-01", "6/4:zone-b-02", "6/4:zone-b-03", "7/4:zone-b-04", // a zone boundary is a barrier
		"8/5:zone-c-00", "8/5:zone-c-01", "9/5:zone-c-02", "9/5:zone-c-03",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order\n got %v\nwant %v", got, want)
	}
}

func TestPlanSlidingWindow(t *testing.T) {
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(3)
	})
	// zone-a: wave 1 (a-00) and wave 2 (a-01, a-02) are ramp waves and
	// barriers; a-03 … a-05 share zone-a's sliding window with waves 3 and 4.
	ns := fixture.Fleet(2, 6)
	for _, n := range []string{"zone-a-00", "zone-a-01", "zone-a-02"} {
		fixture.SetState(ns, n, v1alpha1.NodeDone)
		fixture.Upgrade(ns, n)
	}
	fixture.SetState(ns, "zone-a-03", v1alpha1.NodeDone)
	fixture.Upgrade(ns, "zone-a-03")
	fixture.SetState(ns, "zone-a-04", v1alpha1.NodeSwapZtunnel)
	d := Plan(model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}, p, time.Now())
	// a-03 finished while a-04 (its wave) is still swapping: a-05 (next wave)
	// takes the free slot; maxParallel 2 caps it below maxUnavailable 3.
	if got := starts(d); !reflect.DeepEqual(got, []string{"zone-a-05"}) {
		t.Fatalf("starts %v, want [zone-a-05]", got)
	}
	// The next zone waits until zone-a is finished.
	fixture.SetState(ns, "zone-a-05", v1alpha1.NodeCordon)
	fixture.SetState(ns, "zone-a-04", v1alpha1.NodeDone)
	fixture.Upgrade(ns, "zone-a-04")
	d = Plan(model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}, p, time.Now())
	if got := starts(d); len(got) != 0 {
		t.Fatalf("starts %v across a zone boundary while zone-a-05 is in flight", got)
	}
	// A ramp wave is a barrier: with wave 2 half done, wave 3 does not start.
	ns = fixture.Fleet(1, 6)
	fixture.SetState(ns, "zone-a-00", v1alpha1.NodeDone)
	fixture.Upgrade(ns, "zone-a-00")
	fixture.SetState(ns, "zone-a-01", v1alpha1.NodeDone)
	fixture.Upgrade(ns, "zone-a-01")
	fixture.SetState(ns, "zone-a-02", v1alpha1.NodeGate)
	p = fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(4), intstr.FromInt32(4)
	})
	d = Plan(model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}, p, time.Now())
	if got := starts(d); len(got) != 0 {
		t.Fatalf("starts %v before ramp wave 2 finished", got)
	}
}

// TestPlanDoneNodesRecheckedAgainstNewestRevision: a template that changes
// again mid-rollout leaves the nodes done on the revision before behind the
// newest; the rollout must not report Completed over that mixed fleet, and
// those nodes go again. A done node on the newest revision whose pod is
// momentarily not Ready is not swapped again.
func TestPlanDoneNodesRecheckedAgainstNewestRevision(t *testing.T) {
	const newer = "newer333"
	newest := func(hash string) []model.TargetView {
		ts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
		for i := range ts {
			ts[i].NewestHash = hash
		}
		return ts
	}
	cases := []struct {
		name      string
		setup     func(ns []model.NodeView)
		targets   []model.TargetView
		wantPhase v1alpha1.RolloutPhase
		want      []string // actions, Kind:node
	}{
		{
			name: "every node done on the newest",
			setup: func(ns []model.NodeView) {
				for _, n := range ns {
					fixture.SetState(ns, n.Name, v1alpha1.NodeDone)
					fixture.Upgrade(ns, n.Name)
				}
			},
			targets: newest(fixture.NewHash), wantPhase: v1alpha1.PhaseCompleted,
		},
		{
			name: "the template moved on after every node was done",
			setup: func(ns []model.NodeView) {
				for _, n := range ns {
					fixture.SetState(ns, n.Name, v1alpha1.NodeDone)
					fixture.Upgrade(ns, n.Name)
				}
			},
			targets: newest(newer), wantPhase: v1alpha1.PhaseProgressing,
			want: []string{"Retry:zone-a-00", "Retry:zone-a-01", "Retry:zone-a-02"},
		},
		{
			name: "the template moved on mid-rollout",
			setup: func(ns []model.NodeView) {
				fixture.SetState(ns, "zone-a-00", v1alpha1.NodeDone)
				fixture.Upgrade(ns, "zone-a-00")
			},
			targets: newest(newer), wantPhase: v1alpha1.PhaseProgressing,
			want: []string{"Retry:zone-a-00"},
		},
		{
			name: "a done node's pod restarting on the newest",
			setup: func(ns []model.NodeView) {
				for _, n := range ns {
					fixture.SetState(ns, n.Name, v1alpha1.NodeDone)
					fixture.Upgrade(ns, n.Name)
				}
				p := ns[1].Pods["istio-system/ztunnel"]
				p.Ready = false
				ns[1].Pods["istio-system/ztunnel"] = p
			},
			targets: newest(fixture.NewHash), wantPhase: v1alpha1.PhaseCompleted,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := fixture.Fleet(1, 3)
			tc.setup(ns)
			d := Plan(model.Snapshot{Nodes: ns, Targets: tc.targets}, fixture.Policy(t, nil), time.Now())
			if d.Phase != tc.wantPhase {
				t.Fatalf("phase %s (%s), want %s", d.Phase, d.Reason, tc.wantPhase)
			}
			var got []string
			for _, a := range d.Actions {
				got = append(got, string(a.Kind)+":"+a.Node)
				if a.Kind == ActRetry && !strings.Contains(a.Reason, newer) {
					t.Errorf("retry reason %q does not name the newest revision", a.Reason)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("actions %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPlanRollbackTakesTheFailedNode: the node a halt stopped on may have
// been swapped; rollback takes it back too, first (it was swapped last).
func TestPlanRollbackTakesTheFailedNode(t *testing.T) {
	ns := fixture.Fleet(1, 4)
	for _, n := range ns[:2] {
		fixture.SetState(ns, n.Name, v1alpha1.NodeDone)
		fixture.Upgrade(ns, n.Name)
	}
	fixture.SetState(ns, "zone-a-02", v1alpha1.NodeFailed)
	fixture.Upgrade(ns, "zone-a-02")
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.Rollback = true
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	})
	restored := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	for i := range restored {
		restored[i].NewestHash = fixture.OldHash
	}
	status := v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted, Targets: []v1alpha1.TargetStatus{{Namespace: "istio-system", Name: "istio-cni-node", Revision: fixture.NewHash}, {Namespace: "istio-system", Name: "ztunnel", Revision: fixture.NewHash}}}
	d := Plan(model.Snapshot{Nodes: ns, Targets: restored, Status: status}, p, time.Now())
	if d.Phase != v1alpha1.PhaseRollingBack || len(d.Actions) != 1 || d.Actions[0] != (Action{Kind: ActRollback, Node: "zone-a-02"}) {
		t.Fatalf("%s %q %+v, want RollingBack starting with the failed zone-a-02", d.Phase, d.Reason, d.Actions)
	}
	if !strings.Contains(d.Reason, "3 node(s)") {
		t.Errorf("reason %q, want 3 nodes to swap back", d.Reason)
	}
}

// TestPlanRetriedNodeIsGatedAgain: a node retried after a halt that is
// already on the newest revisions (its swap went through, its gate failed,
// or a restart lost the gate's baseline) is started again, to pass its
// gate; it is never marked Done for being on the newest revision. A node
// this rollout never started is.
func TestPlanRetriedNodeIsGatedAgain(t *testing.T) {
	ns := fixture.Fleet(1, 3)
	fixture.Upgrade(ns, "zone-a-00")
	fixture.Upgrade(ns, "zone-a-01")
	ns[0].Retried = true // zone-a-00: Pending in this rollout's record
	d := Plan(model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}, fixture.Policy(t, nil), time.Now())
	var got []string
	for _, a := range d.Actions {
		got = append(got, string(a.Kind)+" "+a.Node)
	}
	want := []string{"MarkDone zone-a-01", "Start zone-a-00"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
}

// TestPlanKeepsANodeThatLeftTheSelector: a node relabelled out of the
// selector mid-step is still resumed (its worker makes it safe) and still
// holds its slot of maxUnavailable until then.
func TestPlanKeepsANodeThatLeftTheSelector(t *testing.T) {
	nodes := fixture.Fleet(1, 4)
	for i := range nodes {
		nodes[i].Labels["pool"] = "a"
	}
	nodes[0].Labels["pool"] = "b" // relabelled out while draining
	fixture.SetState(nodes, nodes[0].Name, v1alpha1.NodeDrain)
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
	})
	d := Plan(model.Snapshot{Nodes: nodes, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}, p, time.Now())
	var resumed []string
	for _, a := range d.Actions {
		if a.Kind == ActResume {
			resumed = append(resumed, a.Node)
		}
	}
	if !reflect.DeepEqual(resumed, []string{nodes[0].Name}) {
		t.Errorf("resumed %v, want the relabelled node %s", resumed, nodes[0].Name)
	}
	if got := starts(d); len(got) != 1 {
		t.Errorf("started %v: the relabelled node in flight holds one of the 2 slots", got)
	}
	for _, pn := range d.Order {
		if pn.Name == nodes[0].Name {
			t.Errorf("the relabelled node is still in the plan's order")
		}
	}
}

// TestPlanForgetsADeletedNode: a status entry in flight whose Node is gone
// is ended (ActForget); one that finished is left as history; with the
// status's counts or without, and beside a present node in flight.
func TestPlanForgetsADeletedNode(t *testing.T) {
	nodes := fixture.Fleet(1, 2)
	nodes[0].State = v1alpha1.NodeSoak
	for _, counted := range []bool{false, true} {
		st := v1alpha1.NodeRolloutStatus{Nodes: []v1alpha1.NodeStatus{
			{Name: nodes[0].Name, State: v1alpha1.NodeSoak},
			{Name: "gone-soaking", State: v1alpha1.NodeSoak},
			{Name: "gone-done", State: v1alpha1.NodeDone},
		}}
		if counted {
			st.Counts = Counts(st.Nodes)
		}
		d := Plan(model.Snapshot{Nodes: nodes, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType), Status: st}, fixture.Policy(t, nil), time.Now())
		var forgot []Action
		for _, a := range d.Actions {
			if a.Kind == ActForget {
				forgot = append(forgot, a)
			}
		}
		if len(forgot) != 1 || forgot[0].Node != "gone-soaking" || !strings.Contains(forgot[0].Reason, "deleted during its Soak step") {
			t.Errorf("counted %v: forget actions %+v, want one for gone-soaking naming its step", counted, forgot)
		}
	}
}

// TestPlanNotCompletedWhileADeletedNodeIsInFlight: with every present node
// on the newest revision but a deleted node's entry still in flight, the
// rollout stays Progressing until that entry is ended: a completed rollout is
// not planned again, so the entry would read in flight forever
// (TestNodeDeletedInFlightLeavesTheRollout failed so once).
func TestPlanNotCompletedWhileADeletedNodeIsInFlight(t *testing.T) {
	nodes := fixture.Fleet(1, 2)
	for _, n := range nodes {
		fixture.SetState(nodes, n.Name, v1alpha1.NodeDone)
		fixture.Upgrade(nodes, n.Name)
	}
	st := v1alpha1.NodeRolloutStatus{Nodes: []v1alpha1.NodeStatus{{Name: "gone", State: v1alpha1.NodeDrain}}}
	for _, n := range nodes {
		st.Nodes = append(st.Nodes, v1alpha1.NodeStatus{Name: n.Name, State: v1alpha1.NodeDone})
	}
	d := Plan(model.Snapshot{Nodes: nodes, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType), Status: st}, fixture.Policy(t, nil), time.Now())
	if d.Phase != v1alpha1.PhaseProgressing || !strings.Contains(d.Reason, "deleted in flight") {
		t.Errorf("phase %s (%s); want Progressing until the deleted node's entry is ended", d.Phase, d.Reason)
	}
	st.Nodes[0].State = v1alpha1.NodeSkipped
	if d := Plan(model.Snapshot{Nodes: nodes, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType), Status: st}, fixture.Policy(t, nil), time.Now()); d.Phase != v1alpha1.PhaseCompleted {
		t.Errorf("once ended: phase %s (%s); want Completed", d.Phase, d.Reason)
	}
}

// TestPlanCanaryGoneAfterStart: a canary name no node answers to is a
// mistake before the rollout starts (Pending), and a node that left once it
// has started (the rollout goes on without it).
func TestPlanCanaryGoneAfterStart(t *testing.T) {
	nodes := fixture.Fleet(1, 3)
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) { s.CanaryNodes = []string{"gone"} })
	snap := model.Snapshot{Nodes: nodes, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}
	if d := Plan(snap, p, time.Now()); d.Phase != v1alpha1.PhasePending || !strings.Contains(d.Reason, "gone") {
		t.Errorf("before the start: %s %q, want Pending naming the canary", d.Phase, d.Reason)
	}
	snap.Status.StartTime = &metav1.Time{Time: time.Now()}
	if d := Plan(snap, p, time.Now()); d.Phase != v1alpha1.PhaseProgressing || len(starts(d)) == 0 {
		t.Errorf("after the start: %s %q, starts %v; want the others to go on", d.Phase, d.Reason, starts(d))
	}
}

// TestPlanAbortStopsARollback: #27 finding 4. An abort during a rollback
// starts no more swaps back; the rollout ends Aborted once nothing is in
// flight (the rollback used to be planned before the abort was read).
func TestPlanAbortStopsARollback(t *testing.T) {
	ns := fixture.Fleet(1, 4)
	for _, n := range ns[:3] {
		fixture.SetState(ns, n.Name, v1alpha1.NodeDone)
		fixture.Upgrade(ns, n.Name)
	}
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.Rollback, s.Abort = true, true
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
	})
	status := v1alpha1.NodeRolloutStatus{Targets: []v1alpha1.TargetStatus{{Namespace: "istio-system", Name: "istio-cni-node", Revision: fixture.NewHash}, {Namespace: "istio-system", Name: "ztunnel", Revision: fixture.NewHash}}}
	restored := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	for i := range restored {
		restored[i].NewestHash = fixture.OldHash
	}
	d := Plan(model.Snapshot{Nodes: ns, Targets: restored, Status: status}, p, time.Now())
	if d.Phase != v1alpha1.PhaseAborted || len(d.Actions) != 0 {
		t.Fatalf("rollback aborted with nothing in flight: %s %q %+v; want Aborted and no action", d.Phase, d.Reason, d.Actions)
	}
	fixture.SetState(ns, "zone-a-02", v1alpha1.NodeDrain) // its swap back was under way
	d = Plan(model.Snapshot{Nodes: ns, Targets: restored, Status: status}, p, time.Now())
	for _, a := range d.Actions {
		if a.Kind == ActRollback {
			t.Fatalf("rollback aborted: %s planned for %s", a.Kind, a.Node)
		}
	}
	if d.Phase != v1alpha1.PhaseProgressing {
		t.Fatalf("rollback aborted with a node in flight: %s %q; want Progressing until it is safe", d.Phase, d.Reason)
	}
}

// TestPlanResolvesPercentages: maxParallel and maxUnavailable written as
// percentages scale with the nodes the rollout selects, rounded down and at
// least 1, and the plan says what they came to.
func TestPlanResolvesPercentages(t *testing.T) {
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromString("25%"), intstr.FromString("10%")
	})
	ns := fixture.Fleet(1, 40) // one zone: waves ramp 1, 2, 4, 8, 10 …
	for i := range 7 {         // waves 1–3 done
		name := fmt.Sprintf("zone-a-%02d", i)
		fixture.SetState(ns, name, v1alpha1.NodeDone)
		fixture.Upgrade(ns, name)
	}
	d := Plan(model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}, p, time.Now())
	if d.MaxParallel != 10 || d.MaxUnavailable != 4 {
		t.Fatalf("resolved maxParallel %d maxUnavailable %d, want 10 (25%% of 40) and 4 (10%% of 40)", d.MaxParallel, d.MaxUnavailable)
	}
	// Wave 4 has 8 nodes (the ramp doubles up to 10), of which 4 start: the budget.
	if got := starts(d); len(got) != 4 {
		t.Fatalf("starts %v, want 4 (maxUnavailable 10%% of 40)", got)
	}
	var out strings.Builder
	if err := RenderPlan(&out, d, p, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if want := "maxParallel 25% (10 nodes), maxUnavailable 10% (4 nodes)"; !strings.Contains(out.String(), want) {
		t.Errorf("plan %q does not say %q", out.String(), want)
	}
	// Ten nodes: 10% rounds down to 1, never to 0.
	d = Plan(model.Snapshot{Nodes: fixture.Fleet(1, 10), Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}, p, time.Now())
	if d.MaxUnavailable != 1 || len(starts(d)) != 1 {
		t.Errorf("10%% of 10 nodes: maxUnavailable %d, starts %v; want 1 and one start", d.MaxUnavailable, starts(d))
	}
}

// TestPlanWaitsForPromotionBeforeTheFirstStart: what the upstream clusters
// lack holds a rollout that has not started in Pending, saying so; once a
// node has started, the rollout goes on by its own judge.
func TestPlanWaitsForPromotionBeforeTheFirstStart(t *testing.T) {
	p := fixture.Policy(t, nil)
	s := model.Snapshot{Nodes: fixture.Fleet(1, 4), Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType),
		PromotionHold: "upstream staging: no NodeRollout has completed images istio/ztunnel:1.28.1"}
	d := Plan(s, p, time.Now())
	if d.Phase != v1alpha1.PhasePending || d.Promotion != s.PromotionHold || !strings.Contains(d.Reason, "waiting for promotion: upstream staging") || len(starts(d)) != 0 {
		t.Fatalf("not started: phase %s promotion %q reason %q starts %v; want Pending, no start", d.Phase, d.Promotion, d.Reason, starts(d))
	}
	s.Status.StartTime = &metav1.Time{Time: time.Now()}
	if d = Plan(s, p, time.Now()); d.Phase != v1alpha1.PhaseProgressing || len(starts(d)) == 0 || d.Promotion != "" {
		t.Errorf("started: phase %s starts %v promotion %q; want it to go on", d.Phase, starts(d), d.Promotion)
	}
}

// TestPlanHeldByThePrecheckBeforeTheFirstStart: the precheck's error
// findings hold a rollout that has not started in Pending, with no action
// (nothing is cordoned or pre-pulled), saying what it found; once a node has
// started, the rollout goes on by its own judge.
func TestPlanHeldByThePrecheckBeforeTheFirstStart(t *testing.T) {
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) { s.Prepull = true })
	s := model.Snapshot{Nodes: fixture.Fleet(1, 4), Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType),
		PrecheckHold: "precheck found 1 error (nodewise precheck shows them): Error revision-tags: tag prod: points at revision 1-27"}
	d := Plan(s, p, time.Now())
	if d.Phase != v1alpha1.PhasePending || d.Precheck != s.PrecheckHold || d.Reason != s.PrecheckHold || len(d.Actions) != 0 {
		t.Fatalf("not started: phase %s precheck %q reason %q actions %v; want Pending, no action", d.Phase, d.Precheck, d.Reason, d.Actions)
	}
	s.Status.StartTime = &metav1.Time{Time: time.Now()}
	if d = Plan(s, p, time.Now()); d.Phase != v1alpha1.PhaseProgressing || len(d.Actions) == 0 || d.Precheck != "" {
		t.Errorf("started: phase %s actions %v precheck %q; want it to go on", d.Phase, d.Actions, d.Precheck)
	}
}

// TestPlanHaltsOffThePinnedVersion: with spec.version set, a target
// template at another version halts the rollout, naming both, and the node
// already done on the pinned version is not swapped again; the pinned
// version, or a variant of it, rolls.
func TestPlanHaltsOffThePinnedVersion(t *testing.T) {
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) { s.Version = "1.28.1" })
	at := func(tags ...string) []model.TargetView {
		ts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
		for i := range ts {
			ts[i].Images = []string{"docker.io/istio/" + ts[i].Ref.Name + ":" + tags[i%len(tags)]}
		}
		return ts
	}
	ns := fixture.Fleet(1, 3)
	if d := Plan(model.Snapshot{Nodes: ns, Targets: at("1.28.1-distroless", "1.28.1@sha256:abc")}, p, time.Now()); d.Phase != v1alpha1.PhaseProgressing || len(starts(d)) == 0 {
		t.Fatalf("the pinned version: phase %s %q starts %v; want it rolled", d.Phase, d.Reason, starts(d))
	}
	// zone-a-00 was done on the pinned version; the template moved on.
	fixture.SetState(ns, "zone-a-00", v1alpha1.NodeDone)
	fixture.Upgrade(ns, "zone-a-00")
	moved := at("1.28.2")
	for i := range moved {
		moved[i].NewestHash = "new333"
	}
	d := Plan(model.Snapshot{Nodes: ns, Targets: moved}, p, time.Now())
	if d.Phase != v1alpha1.PhaseHalted || !strings.Contains(d.Reason, "template is at 1.28.2") || !strings.Contains(d.Reason, "not the pinned version 1.28.1") {
		t.Fatalf("another version: phase %s reason %q; want Halted naming 1.28.2 and 1.28.1", d.Phase, d.Reason)
	}
	for _, a := range d.Actions {
		if a.Node == "zone-a-00" || a.Kind == ActStart {
			t.Errorf("off the pin, the plan still acts: %+v", a)
		}
	}
	if d := Plan(model.Snapshot{Nodes: ns, Targets: at("")}, p, time.Now()); d.Phase != v1alpha1.PhaseHalted || !strings.Contains(d.Reason, "no version tag") {
		t.Errorf("an untagged image: phase %s reason %q", d.Phase, d.Reason)
	}
}
