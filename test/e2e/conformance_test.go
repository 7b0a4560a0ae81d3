package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/conformance"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestConformanceGateHoldsNodes: a NodeRollout with spec.gates.conformance
// (when AfterCanary) cordons no node while its start Job runs; the
// orchestrator restarted mid-gate finds that Job instead of creating a
// second; the Job fails (the test acts as the kubelet) and the rollout
// halts naming it, no node touched; resumed, the next Job passes and the
// canary node goes; then the after-canary Job holds the other nodes until it
// passes, and the rollout completes.
func TestConformanceGateHoldsNodes(t *testing.T) {
	t.Parallel()
	const nodes, jobNS = 3, "default"
	e := newEnv(t, nodes, 1)
	ctx := context.Background()
	kube := e.c.Client
	e.upgrade("1.28.1")
	stop, _ := e.runInProcess("first")
	e.apply(rollout("conf", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
		s.CanaryNodes = []string{"node-001"}
		s.Gates.Conformance = &v1alpha1.ConformanceGate{Namespace: jobNS, When: v1alpha1.ConformanceAfterCanary, JobTemplate: testkit.ConformanceJob()}
	}))
	untouched := func(when string, except ...string) {
		t.Helper()
		nl, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nl.Items {
			if strings.Contains(strings.Join(except, ","), n.Name) {
				continue
			}
			if n.Spec.Unschedulable || n.Annotations[model.AnnotationStep] != "" {
				t.Fatalf("%s: node %s cordoned %v, step %q; want it untouched", when, n.Name, n.Spec.Unschedulable, n.Annotations[model.AnnotationStep])
			}
		}
	}
	jobsOf := func() []string {
		t.Helper()
		jobs, err := kube.BatchV1().Jobs(jobNS).List(ctx, metav1.ListOptions{LabelSelector: conformance.LabelOwner + "=conf"})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, j := range jobs.Items {
			if j.DeletionTimestamp == nil {
				names = append(names, j.Name)
			}
		}
		return names
	}

	// The start Job runs; the orchestrator is replaced meanwhile.
	start1 := conformance.JobName("conf", conformance.StepStart, 1)
	testkit.JobPod(t, ctx, kube, jobNS, start1)
	untouched("while the start Job runs")
	stop()
	e.runInProcess("second")
	time.Sleep(2 * time.Second) // passes of the new leader with the Job running
	if names := jobsOf(); len(names) != 1 || names[0] != start1 {
		t.Fatalf("conformance Jobs after a restart mid-gate: %v, want only %s", names, start1)
	}
	untouched("after a restart mid-gate")

	// It fails: the rollout halts, naming it.
	testkit.FinishJobPod(t, ctx, kube, jobNS, start1, corev1.PodFailed)
	nr := e.waitPhase("conf", time.Minute, v1alpha1.PhaseHalted)
	if r := nr.Status.HaltReason; !strings.Contains(r, jobNS+"/"+start1) || !strings.Contains(r, "failed") || !strings.Contains(r, "no logs from pod") {
		t.Fatalf("halt reason %q, want the Job, failed, and why no log lines could be read", r)
	}
	untouched("after a failed start Job")

	// Resumed, the next attempt passes: the canary goes, the rest wait for
	// the after-canary Job.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, model.AnnotationResumeToken, time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := e.rollouts.Patch(ctx, "conf", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.FinishJobPod(t, ctx, kube, jobNS, conformance.JobName("conf", conformance.StepStart, 2), corev1.PodSucceeded)
	after := conformance.JobName("conf", conformance.StepAfterCanary, 1)
	testkit.JobPod(t, ctx, kube, jobNS, after)
	if nr = e.waitPhase("conf", time.Minute, v1alpha1.PhaseProgressing); nr.Status.Counts.Done != 1 {
		t.Fatalf("after-canary Job running with %d node(s) done, want the canary alone", nr.Status.Counts.Done)
	}
	untouched("while the after-canary Job runs", "node-001")
	testkit.FinishJobPod(t, ctx, kube, jobNS, after, corev1.PodSucceeded)
	nr = e.waitPhase("conf", time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || nr.Status.Conformance == nil || nr.Status.Conformance.Step != conformance.StepAfterCanary || nr.Status.Conformance.Outcome != v1alpha1.ConformancePassed {
		t.Fatalf("phase %s %q conformance %+v, want Completed after the after-canary Job passed", nr.Status.Phase, nr.Status.HaltReason, nr.Status.Conformance)
	}
	e.assertAllOnNewest(nodes)
}
