package jobgate

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func TestStep(t *testing.T) {
	run := func(step string, o v1alpha1.ConformanceOutcome) *v1alpha1.ConformanceStatus {
		return &v1alpha1.ConformanceStatus{Step: step, Attempt: 1, Outcome: o}
	}
	for _, tc := range []struct {
		name         string
		when         v1alpha1.ConformanceWhen
		standing     bool
		rec          *v1alpha1.ConformanceStatus
		canariesDone bool
		want         string
	}{
		{"no run yet", "", false, nil, false, "start"},
		{"start running", "", false, run("start", v1alpha1.ConformanceRunning), false, "start"},
		{"start failed (resumed)", "", false, run("start", v1alpha1.ConformanceFailed), false, "start"},
		{"start passed", "", false, run("start", v1alpha1.ConformancePassed), true, ""},
		{"start passed, canaries under way", v1alpha1.ConformanceAfterCanary, false, run("start", v1alpha1.ConformancePassed), false, ""},
		{"start passed, canaries done", v1alpha1.ConformanceAfterCanary, false, run("start", v1alpha1.ConformancePassed), true, "after-canary"},
		{"after-canary failed (resumed)", v1alpha1.ConformanceAfterCanary, false, run("after-canary", v1alpha1.ConformanceFailed), true, "after-canary"},
		{"after-canary passed", v1alpha1.ConformanceAfterCanary, false, run("after-canary", v1alpha1.ConformancePassed), true, ""},
		{"standing run 3", "", true, run("r2-start", v1alpha1.ConformancePassed), false, "r3-start"},
	} {
		nr := &v1alpha1.NodeRollout{}
		nr.Spec.Gates.Conformance = &v1alpha1.ConformanceGate{Namespace: "qa", When: tc.when}
		nr.Spec.Standing = tc.standing
		if tc.standing {
			nr.Status.Runs = []v1alpha1.RunRecord{{Run: 3}}
		}
		nr.Status.Conformance = tc.rec
		if got := Step(nr, tc.canariesDone); got != tc.want {
			t.Errorf("%s: Step = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := Step(&v1alpha1.NodeRollout{}, true); got != "" {
		t.Errorf("no gate: Step = %q", got)
	}
}

// TestStopEndsARunningJob: an abort records the running run Failed, then
// deletes its Job; a run that ended is left as it is.
func TestStopEndsARunningJob(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "qa", Name: "up-conformance-start-1"}})
	var written *v1alpha1.ConformanceStatus
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "up"}}
	nr.Status.Conformance = &v1alpha1.ConformanceStatus{Step: "start", Attempt: 1, Job: "up-conformance-start-1", Namespace: "qa", Outcome: v1alpha1.ConformanceRunning}
	g := Gate{Kube: kube, Mutate: func(_ context.Context, _ string, f func(*v1alpha1.NodeRolloutStatus)) error {
		st := nr.Status.DeepCopy()
		f(st)
		if _, err := kube.BatchV1().Jobs("qa").Get(ctx, "up-conformance-start-1", metav1.GetOptions{}); err != nil {
			t.Error("the Job was deleted before its run was recorded stopped")
		}
		written = st.Conformance
		return nil
	}}
	if err := g.Stop(ctx, nr); err != nil {
		t.Fatal(err)
	}
	if written == nil || written.Outcome != v1alpha1.ConformanceFailed {
		t.Fatalf("recorded %+v, want the run Failed", written)
	}
	if _, err := kube.BatchV1().Jobs("qa").Get(ctx, "up-conformance-start-1", metav1.GetOptions{}); err == nil {
		t.Error("the running Job outlived the abort")
	}
	written = nil
	nr.Status.Conformance.Outcome = v1alpha1.ConformancePassed
	if err := g.Stop(ctx, nr); err != nil || written != nil {
		t.Errorf("a passed run: err %v, wrote %+v; want nothing done", err, written)
	}
}
