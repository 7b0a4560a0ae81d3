package orchestrator

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestStandingPolicyNextRunWaitsForPromotion: an idle standing policy
// whose targets moved to a new revision begins its next run as a new
// rollout would: spec.promotion holds its first start (here the upstream
// cannot be read: fail closed), no node is touched, and no run begins.
func TestStandingPolicyNextRunWaitsForPromotion(t *testing.T) {
	rolled := []v1alpha1.TargetStatus{{Namespace: istioNS, Name: "istio-cni-node", Revision: fixture.OldHash}, {Namespace: istioNS, Name: "ztunnel", Revision: fixture.OldHash}}
	start, end := metav1.NewTime(t0.Add(-2*time.Hour)), metav1.NewTime(t0.Add(-time.Hour))
	nr := rollout("policy", func(nr *v1alpha1.NodeRollout) {
		nr.Spec.Standing = true
		nr.Spec.Promotion = &v1alpha1.PromotionSpec{Upstreams: []v1alpha1.Upstream{{Name: "staging", KubeconfigSecret: "staging-kubeconfig"}}}
		nr.Status = v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseIdle, ObservedGeneration: 1, StartTime: &start, CompletionTime: &end, Targets: rolled,
			Nodes: []v1alpha1.NodeStatus{{Name: "n1", State: v1alpha1.NodeDone}},
			Runs:  []v1alpha1.RunRecord{{Run: 1, Targets: rolled, Outcome: v1alpha1.PhaseCompleted, StartTime: start, CompletionTime: &end}}}
	})
	objs := cluster(fixture.OldHash, "n1")
	nodeIn(objs, "n1").Annotations = recordOf(nr, v1alpha1.NodeDone)
	e := newEnv(t, append(objs, nr)...)
	if err := e.pass("policy"); err != nil {
		t.Fatal(err)
	}
	e.ex.wg.Wait()
	got := e.stored("policy")
	if got.Status.Phase != v1alpha1.PhasePending || !strings.Contains(condition(got.Status, "Promoted").Message, "staging") {
		t.Errorf("phase %s, Promoted %+v; want Pending, waiting for upstream staging", got.Status.Phase, condition(got.Status, "Promoted"))
	}
	if len(got.Status.Runs) != 1 {
		t.Errorf("runs %+v; want none begun while promotion holds", got.Status.Runs)
	}
	if n1 := e.apiNode("n1"); n1.Spec.Unschedulable || model.InFlight(v1alpha1.NodeState(n1.Annotations[model.AnnotationStep])) {
		t.Errorf("n1 started while promotion holds: unschedulable %v, annotations %v", n1.Spec.Unschedulable, n1.Annotations)
	}
}
