package jobgate

import (
	"testing"

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
