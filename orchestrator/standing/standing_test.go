package standing

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

func targets(hash string) []model.TargetView {
	var ts []model.TargetView
	for _, r := range model.DefaultTargets {
		ts = append(ts, model.TargetView{Ref: r, Found: true, Strategy: appsv1.OnDeleteDaemonSetStrategyType, NewestHash: hash, Settled: true, Images: []string{"istio/" + r.Name + ":" + hash}})
	}
	return ts
}

func rolled(hash string) []v1alpha1.TargetStatus {
	var out []v1alpha1.TargetStatus
	for _, r := range model.DefaultTargets {
		out = append(out, v1alpha1.TargetStatus{Namespace: r.Namespace, Name: r.Name, Revision: hash})
	}
	return out
}

func TestWake(t *testing.T) {
	idle := v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseIdle, Targets: rolled("r2")}
	off := targets("r2")
	off[1].Strategy = appsv1.RollingUpdateDaemonSetStrategyType
	gone := targets("r2")
	gone[0].Found = false
	unsettled := targets("r3")
	unsettled[0].Settled, unsettled[1].Settled = false, false
	for _, tc := range []struct {
		name    string
		targets []model.TargetView
		want    string // a part of the reason; "" stays idle
	}{
		{"same revisions", targets("r2"), ""},
		{"a new revision", targets("r3"), "DaemonSet istio-system/istio-cni-node has revision r3; the last run rolled r2"},
		{"off OnDelete", off, "DaemonSet istio-system/ztunnel uses updateStrategy RollingUpdate"},
		{"gone", gone, "not found"},
		{"not observed by its controller yet", unsettled, ""},
	} {
		got := Wake(idle, tc.targets)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: Wake = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPhase(t *testing.T) {
	if got := Phase(v1alpha1.NodeRolloutSpec{Standing: true}, v1alpha1.PhaseCompleted); got != v1alpha1.PhaseIdle {
		t.Errorf("standing, completed: %s, want Idle", got)
	}
	if got := Phase(v1alpha1.NodeRolloutSpec{}, v1alpha1.PhaseCompleted); got != v1alpha1.PhaseCompleted {
		t.Errorf("one-shot, completed: %s, want Completed", got)
	}
	if got := Phase(v1alpha1.NodeRolloutSpec{Standing: true}, v1alpha1.PhaseHalted); got != v1alpha1.PhaseHalted {
		t.Errorf("standing, halted: %s, want Halted", got)
	}
}

// TestRuns walks a standing policy through its runs: the first begins and
// completes, the same revisions begin nothing, a new revision begins run 2
// afresh (times, halt reason), a halted run blocks the next revision, and
// the history keeps the newest MaxRuns.
func TestRuns(t *testing.T) {
	spec := v1alpha1.NodeRolloutSpec{Standing: true}
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var s v1alpha1.NodeRolloutStatus
	if Begin(&s, v1alpha1.NodeRolloutSpec{}, v1alpha1.PhaseProgressing, targets("r2"), t0) || len(s.Runs) != 0 {
		t.Fatal("a one-shot rollout began a run")
	}
	if Begin(&s, spec, v1alpha1.PhasePending, targets("r2"), t0) {
		t.Fatal("a run began while the plan refuses to start (Pending)")
	}
	if !Begin(&s, spec, v1alpha1.PhaseProgressing, targets("r2"), t0) || len(s.Runs) != 1 || s.Runs[0].Run != 1 {
		t.Fatalf("the first run did not begin: %+v", s.Runs)
	}
	s.Phase, s.Targets = v1alpha1.PhaseProgressing, rolled("r2")
	Note(&s, "wave 1", t0)
	if r := s.Runs[0]; r.Outcome != v1alpha1.PhaseProgressing || r.Reason != "wave 1" || r.CompletionTime != nil {
		t.Fatalf("run 1 under way: %+v", r)
	}
	done := metav1.NewTime(t0.Add(time.Minute))
	s.Phase, s.CompletionTime, s.StartTime = v1alpha1.PhaseIdle, &done, &t0
	Note(&s, "3 node(s) on the newest revision", done)
	if r := s.Runs[0]; r.Outcome != v1alpha1.PhaseCompleted || r.CompletionTime == nil || !r.CompletionTime.Equal(&done) {
		t.Fatalf("run 1 completed: %+v", r)
	}
	if Begin(&s, spec, v1alpha1.PhaseCompleted, targets("r2"), done) {
		t.Fatal("the revisions run 1 rolled began another run")
	}
	t2 := metav1.NewTime(t0.Add(time.Hour))
	if !Begin(&s, spec, v1alpha1.PhaseProgressing, targets("r3"), t2) || s.Runs[0].Run != 2 || s.Runs[0].Targets[0].Revision != "r3" || len(s.Runs) != 2 {
		t.Fatalf("revision r3 did not begin run 2: %+v", s.Runs)
	}
	if s.StartTime != nil || s.CompletionTime != nil {
		t.Errorf("run 2 kept run 1's times: start %v completion %v", s.StartTime, s.CompletionTime)
	}
	s.Phase, s.HaltReason = v1alpha1.PhaseHalted, "node n1: Fail"
	Note(&s, "", t2)
	if r := s.Runs[0]; r.Outcome != v1alpha1.PhaseHalted || r.Reason != "node n1: Fail" || r.CompletionTime != nil {
		t.Fatalf("run 2 halted: %+v", r)
	}
	if Begin(&s, spec, v1alpha1.PhaseHalted, targets("r4"), t2) || len(s.Runs) != 2 {
		t.Fatalf("a new revision began a run past the halted one: %+v", s.Runs)
	}
	for i := 0; i < 2*v1alpha1.MaxRuns; i++ {
		s.Runs[0].Outcome = v1alpha1.PhaseCompleted
		Begin(&s, spec, v1alpha1.PhaseProgressing, targets("x"+string(rune('a'+i))), t2)
	}
	if len(s.Runs) != v1alpha1.MaxRuns || s.Runs[0].Run != int64(2+2*v1alpha1.MaxRuns) {
		t.Errorf("history of %d runs, newest #%d; want %d, newest #%d", len(s.Runs), s.Runs[0].Run, v1alpha1.MaxRuns, 2+2*v1alpha1.MaxRuns)
	}
}

func TestSummary(t *testing.T) {
	now := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	end := metav1.NewTime(now.Add(-10 * time.Minute))
	nr := &v1alpha1.NodeRollout{Spec: v1alpha1.NodeRolloutSpec{Standing: true}}
	if got := Summary(nr, now); got != "standing: rolls each new revision of its targets; no run yet" {
		t.Errorf("no run: %q", got)
	}
	nr.Status.Runs = []v1alpha1.RunRecord{
		{Run: 2, Outcome: v1alpha1.PhaseHalted, Targets: []v1alpha1.TargetStatus{{Name: "ztunnel", Revision: "r3"}}, StartTime: metav1.NewTime(now.Add(-time.Minute))},
		{Run: 1, Outcome: v1alpha1.PhaseCompleted, Targets: []v1alpha1.TargetStatus{{Name: "ztunnel", Revision: "r2"}}, CompletionTime: &end},
	}
	want := "standing: rolls each new revision of its targets; runs: #2 Halted (ztunnel@r3) 1m0s ago, #1 Completed (ztunnel@r2) 10m0s ago"
	if got := Summary(nr, now); got != want {
		t.Errorf("Summary = %q\nwant      %q", got, want)
	}
	if got := Summary(&v1alpha1.NodeRollout{}, now); got != "" {
		t.Errorf("a one-shot rollout: %q, want none", got)
	}
}
