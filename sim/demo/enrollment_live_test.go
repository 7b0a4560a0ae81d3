package demo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestLiveNoListenBuildHaltsOnEnrollment: a ztunnel build that leaves one
// pod's namespace without its HBONE listener (-nolisten), swapped in place on
// the busiest node. The simulated pods' traffic is plaintext and never uses
// HBONE, so the traffic figures alone pass the node; the enrollment check
// halts the rollout there, naming the pod and the listeners check.
func TestLiveNoListenBuildHaltsOnEnrollment(t *testing.T) {
	e := newLiveEnv(t, 3)
	node := e.faultyBuild("1.27.4-nolisten")
	nr := faultyRollout("nolisten", node, true)
	srttAboveLoadNoise(nr) // the build is healthy for traffic: keep load noise out of its traffic verdict
	nr = e.run(nr, node)
	ns := nodeStatus(t, nr, node)
	t.Logf("halt reason: %s", nr.Status.HaltReason)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node %s %s (verdict %q): want Halted at %s", nr.Status.Phase, node, ns.State, ns.Verdict, node)
	}
	if !strings.Contains(nr.Status.HaltReason, "was enrolled before the swap and is not after it: listeners failed: nothing listens on 15008") {
		t.Errorf("halt reason %q: want the pod that lost its HBONE listener, with the listeners check", nr.Status.HaltReason)
	}
	j := ns.Judgement
	if j == nil {
		t.Fatalf("node %s has no judgement", node)
	}
	if j.TrafficOutcome != v1alpha1.OutcomePass {
		t.Errorf("the traffic figures alone: %q, want Pass (only enrollment should fail this build); verdict %q", j.TrafficOutcome, ns.Verdict)
	}
	var n, total int
	if _, err := fmt.Sscanf(j.Enrollment, "enrolled %d/%d", &n, &total); err != nil || total == 0 || n != total-1 {
		t.Errorf("enrollment count %q: want all the node's ambient pods but one enrolled", j.Enrollment)
	}
}

// TestLiveHealthyRolloutKeepsEveryPodEnrolled: a healthy build rolled over
// every node in place: every ambient pod is enrolled after the swap on every
// node, and each node's status says so in one count.
func TestLiveHealthyRolloutKeepsEveryPodEnrolled(t *testing.T) {
	e := newLiveEnv(t, 3)
	e.upgrade("1.28.1")
	e.settle()
	canary, err := busiestAmbientNode(context.Background(), e.c)
	if err != nil {
		t.Fatal(err)
	}
	nr := judged(healthyRollout("enrolled", canary), 5*time.Second, 5*time.Second, v1alpha1.InconclusivePass)
	nr.Spec.Drain.Policy = v1alpha1.DrainNever
	srttAboveLoadNoise(nr)
	nr, err = runRollout(context.Background(), e.rc, nr, newView(testWriter{t}, false))
	if err != nil {
		t.Fatal(err)
	}
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("rollout %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	if len(nr.Status.Nodes) != 3 {
		t.Fatalf("%d nodes in status, want 3", len(nr.Status.Nodes))
	}
	for _, ns := range nr.Status.Nodes {
		t.Logf("%s: %s", ns.Name, ns.Verdict)
		if ns.Judgement == nil {
			t.Errorf("node %s was not judged", ns.Name)
			continue
		}
		var n, total int
		if _, err := fmt.Sscanf(ns.Judgement.Enrollment, "enrolled %d/%d", &n, &total); err != nil || n != total || (ns.Name == canary && total == 0) {
			t.Errorf("node %s: enrollment %q, want every ambient pod enrolled (some on the canary %s)", ns.Name, ns.Judgement.Enrollment, canary)
		}
		if !strings.Contains(ns.Verdict, ns.Judgement.Enrollment) {
			t.Errorf("node %s: verdict %q does not carry its enrollment count %q", ns.Name, ns.Verdict, ns.Judgement.Enrollment)
		}
	}
}
