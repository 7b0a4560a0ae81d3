package gitops

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/deploy/argocd"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	orchstatus "github.com/nodewise/nodewise/orchestrator/status"
)

// recorded is a standing policy's object after the orchestrator's pass
// decided d over targets (status.Record), as a client reads it.
func recorded(t *testing.T, prev v1alpha1.NodeRolloutStatus, d planner.Decision, targets []model.TargetView) map[string]any {
	t.Helper()
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "standing", Generation: 1}, Spec: v1alpha1.NodeRolloutSpec{Standing: true}}
	nr.Status = prev
	orchstatus.Record(&nr.Status, nr, d, targets, nil, metav1.Now())
	data, err := json.Marshal(map[string]any{"apiVersion": "nodewise.io/v1alpha1", "kind": "NodeRollout", "metadata": map[string]any{"name": "standing", "generation": 1}, "status": nr.Status})
	if err != nil {
		t.Fatal(err)
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return u.Object
}

func standingTargets(strategy appsv1.DaemonSetUpdateStrategyType, hash string) []model.TargetView {
	var ts []model.TargetView
	for _, r := range model.DefaultTargets {
		ts = append(ts, model.TargetView{Ref: r, Found: true, Strategy: strategy, NewestHash: hash, Settled: true})
	}
	return ts
}

// TestStandingPolicyReadsAlike: a standing policy whose run completed is
// Idle: Healthy in Argo CD, naming its last run, and Current in kstatus;
// one whose target left OnDelete is Degraded and Failed, both naming the
// DaemonSet and the fix.
func TestStandingPolicyReadsAlike(t *testing.T) {
	script, err := argocd.HealthScript("NodeRollout")
	if err != nil {
		t.Fatal(err)
	}
	idle := recorded(t, v1alpha1.NodeRolloutStatus{}, planner.Decision{Phase: v1alpha1.PhaseCompleted, Reason: "3 node(s) on the newest revision"}, standingTargets(appsv1.OnDeleteDaemonSetStrategyType, "rev2"))
	if ph := idle["status"].(map[string]any)["phase"]; ph != string(v1alpha1.PhaseIdle) {
		t.Fatalf("a standing policy's completed run leaves phase %v, want Idle", ph)
	}
	if h, err := ArgoHealth(script, idle); err != nil || h.Status != "Healthy" || !strings.Contains(h.Message, "Idle") || !strings.Contains(h.Message, "run 1 Completed") {
		t.Errorf("idle: Argo CD %+v (%v), want Healthy naming Idle and run 1 Completed", h, err)
	}
	if got, msg, err := Kstatus(idle); err != nil || got != status.CurrentStatus {
		t.Errorf("idle: kstatus %s %q (%v), want Current", got, msg, err)
	}

	targets := standingTargets(appsv1.OnDeleteDaemonSetStrategyType, "rev2")
	targets[1].Strategy = appsv1.RollingUpdateDaemonSetStrategyType
	d := planner.Decision{Phase: v1alpha1.PhasePending, Reason: planner.OneLine(planner.ValidateTargets(targets))}
	off := recorded(t, v1alpha1.NodeRolloutStatus{}, d, targets)
	want := "DaemonSet istio-system/ztunnel uses updateStrategy RollingUpdate"
	if h, err := ArgoHealth(script, off); err != nil || h.Status != "Degraded" || !strings.Contains(h.Message, want) || !strings.Contains(h.Message, "updateStrategy.type=OnDelete") {
		t.Errorf("off OnDelete: Argo CD %+v (%v), want Degraded naming %q and the fix", h, err, want)
	}
	if got, msg, err := Kstatus(off); err != nil || got != status.FailedStatus || !strings.Contains(msg, want) {
		t.Errorf("off OnDelete: kstatus %s %q (%v), want Failed naming %q", got, msg, err, want)
	}
}
