package sidecar

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/conformance"
	"github.com/nodewise/nodewise/test/testkit"
)

// conformanceNS is where the tests' conformance Jobs run: the controller's
// own namespace, where deploy/sidecar's RBAC lets it run them.
const conformanceNS = "nodewise-system"

// TestConformanceGate: a migration whose spec.gates.conformance Job times
// out halts before any namespace moves, naming the Job; resumed, its next
// Job fails (the test, as the kubelet, fails the Job's pod) and it halts
// again, with the Job's name and the reason no log lines could be read
// (the simulated nodes serve none); resumed again, the controller is
// stopped while the third Job runs and a new one finds that Job instead of
// creating a second (each attempt removes the previous attempt's failed
// Job); the Job passes and the wave starts. The controller
// runs as its own ServiceAccount with deploy/sidecar's RBAC.
func TestConformanceGate(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx := e.ctx
	e.namespace("c-1", map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: "1"}, app{name: "web", replicas: 1})
	e.allOn(time.Minute, "1.27.3", 1, "c-1")
	sa := e.asRevisionsServiceAccount()
	stop := e.controllerAs(nil, sa)

	timeout := v1alpha1.Duration{Duration: 3 * time.Second}
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "c"},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5},
			Gates: &v1alpha1.GatesSpec{Conformance: &v1alpha1.ConformanceGate{Namespace: conformanceNS, Timeout: &timeout, JobTemplate: testkit.ConformanceJob()}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unmoved := func(when string) {
		t.Helper()
		if tags, _ := e.proxies("c-1"); tags[firstKey(tags)] != "1.27.3" {
			t.Fatalf("c-1 moved %s: %v", when, tags)
		}
		if rev := e.labels("c-1")["istio.io/rev"]; rev != "1-27" {
			t.Fatalf("c-1 relabelled %s: istio.io/rev=%s", when, rev)
		}
	}

	// 1. The Job never finishes: the run times out.
	rm := e.waitPhase("c", time.Minute, v1alpha1.MigrationHalted)
	first := conformance.JobName("c", conformance.StepStart, 1)
	if !strings.Contains(rm.Status.Reason, first) || !strings.Contains(rm.Status.Reason, "timed out") && !strings.Contains(rm.Status.Reason, "DeadlineExceeded") {
		t.Fatalf("timed-out conformance: reason %q, want Job %s and a timeout", rm.Status.Reason, first)
	}
	unmoved("after a timed-out conformance Job")

	// 2. Resumed with a longer timeout: the second attempt's pod fails.
	e.patch("c", `{"spec":{"gates":{"conformance":{"timeout":"1m"}}}}`)
	e.resume("c", "r1")
	second := conformance.JobName("c", conformance.StepStart, 2)
	testkit.FinishJobPod(t, ctx, e.c.Client, conformanceNS, second, corev1.PodFailed)
	rm = e.waitPhase("c", time.Minute, v1alpha1.MigrationHalted)
	if !strings.Contains(rm.Status.Reason, second) || !strings.Contains(rm.Status.Reason, "failed") || !strings.Contains(rm.Status.Reason, "no logs from pod") {
		t.Fatalf("failed conformance: reason %q, want Job %s, failed, and why there are no log lines", rm.Status.Reason, second)
	}
	if c := rm.Status.Conformance; c == nil || c.Outcome != v1alpha1.ConformanceFailed || c.Job != second {
		t.Fatalf("status.conformance %+v, want %s Failed", c, second)
	}
	unmoved("after a failed conformance Job")
	if _, err := e.c.Client.BatchV1().Jobs(conformanceNS).Get(ctx, second, metav1.GetOptions{}); err != nil {
		t.Fatalf("the failed Job is not kept to read: %v", err)
	}

	// 3. Resumed, the controller restarted while the third Job runs.
	e.resume("c", "r2")
	third := conformance.JobName("c", conformance.StepStart, 3)
	testkit.JobPod(t, ctx, e.c.Client, conformanceNS, third)
	stop()
	e.controllerAs(nil, sa)
	time.Sleep(time.Second) // five reconcile intervals of the new controller with the Job running
	jobs, err := e.c.Client.BatchV1().Jobs(conformanceNS).List(ctx, metav1.ListOptions{LabelSelector: conformance.LabelOwner + "=c"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range jobs.Items {
		names = append(names, j.Name)
		if len(j.OwnerReferences) != 1 || j.OwnerReferences[0].Kind != "RevisionMigration" || j.OwnerReferences[0].UID != rm.UID {
			t.Errorf("Job %s owners %+v, want the migration", j.Name, j.OwnerReferences)
		}
	}
	// The third attempt removed the second's failed Job (as the second the first's).
	if len(names) != 1 || names[0] != third {
		t.Fatalf("Jobs after a restart mid-gate: %v, want only the running %s", names, third)
	}
	if rm = e.migration("c"); rm.Status.Phase != v1alpha1.MigrationGating || !strings.Contains(rm.Status.Reason, third) {
		t.Fatalf("mid-gate: %s %q, want Gating on %s", rm.Status.Phase, rm.Status.Reason, third)
	}
	unmoved("while the conformance Job runs")

	// 4. The Job passes: the wave starts, and the passed Job is removed.
	testkit.FinishJobPod(t, ctx, e.c.Client, conformanceNS, third, corev1.PodSucceeded)
	rm = e.waitPhase("c", time.Minute, v1alpha1.MigrationSucceeded)
	if c := rm.Status.Conformance; c == nil || c.Outcome != v1alpha1.ConformancePassed || c.Job != third {
		t.Fatalf("status.conformance %+v, want %s Passed", c, third)
	}
	e.allOn(time.Minute, "1.28.1", 1, "c-1")
	testkit.WaitFor(t, 30*time.Second, "the passed Job removed", func() (bool, error) {
		_, err := e.c.Client.BatchV1().Jobs(conformanceNS).Get(ctx, third, metav1.GetOptions{})
		return err != nil, err
	})
}
