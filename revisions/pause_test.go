package revisions

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/istio/inventory"
)

// statusWrites is a RevisionMigrations client that keeps the status writes.
type statusWrites struct {
	v1alpha1.RevisionMigrationInterface
	writes []v1alpha1.RevisionMigrationStatus
}

func (s *statusWrites) UpdateStatus(_ context.Context, rm *v1alpha1.RevisionMigration, _ metav1.UpdateOptions) (*v1alpha1.RevisionMigration, error) {
	out := rm.DeepCopy()
	s.writes = append(s.writes, out.Status)
	out.ResourceVersion = strconv.Itoa(len(s.writes))
	return out, nil
}

// twoWaves is a migration whose wave w0 (ns a) is done and whose wave w1
// (ns b, phase second) is current.
func twoWaves(phase v1alpha1.MigrationPhase, second v1alpha1.NamespacePhase) *v1alpha1.RevisionMigration {
	rm := &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 1},
		Spec:       v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 1}},
	}
	rm.Status = v1alpha1.RevisionMigrationStatus{
		Phase:       phase,
		CurrentWave: 1,
		Waves:       []v1alpha1.ResolvedWave{{Name: "w0", Namespaces: []string{"a"}}, {Name: "w1", Namespaces: []string{"b"}}},
		Namespaces: []v1alpha1.NamespaceStatus{
			{Name: "a", Wave: 0, Phase: v1alpha1.NamespaceReady},
			{Name: "b", Wave: 1, Phase: second},
		},
	}
	return rm
}

func newTestController(t *testing.T) (*Controller, *statusWrites, *fake.Clientset, *snapshot) {
	t.Helper()
	kube := fake.NewClientset()
	mc := &statusWrites{}
	c, err := New(Config{Kube: kube, Migrations: mc, Registry: prometheus.NewRegistry(), Now: func() time.Time { return time.Unix(1000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := buildSnapshot(inventory.Options{}, inventory.Objects{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, mc, kube, snap
}

// TestPauseHoldsNextWave: spec.paused stops a migration before a wave that
// has not started (nothing is retagged, Phase Paused, said once), and
// unpausing starts it.
func TestPauseHoldsNextWave(t *testing.T) {
	c, mc, kube, snap := newTestController(t)
	ctx := context.Background()
	rm := twoWaves(v1alpha1.MigrationProgressing, v1alpha1.NamespacePending)
	rm.Spec.Paused = true
	for i := 0; i < 2; i++ {
		if _, err := c.reconcile(ctx, rm, snap); err != nil {
			t.Fatal(err)
		}
	}
	if rm.Status.Phase != v1alpha1.MigrationPaused || !strings.Contains(rm.Status.Reason, "paused before wave w1") {
		t.Fatalf("paused migration: phase %s reason %q, want Paused before wave w1", rm.Status.Phase, rm.Status.Reason)
	}
	if len(mc.writes) != 1 {
		t.Errorf("%d status writes for one pause, want 1 (a held pause is not rewritten)", len(mc.writes))
	}
	if rm.Status.Namespaces[1].Phase != v1alpha1.NamespacePending {
		t.Errorf("namespace b %s under a pause, want Pending", rm.Status.Namespaces[1].Phase)
	}
	if n := len(kube.Actions()); n != 0 {
		t.Errorf("%d API calls under a pause: %v", n, kube.Actions())
	}
	rm.Spec.Paused = false
	if _, err := c.reconcile(ctx, rm, snap); err != nil {
		t.Fatal(err)
	}
	if rm.Status.Phase != v1alpha1.MigrationProgressing || !strings.Contains(rm.Status.Reason, "starting wave w1") {
		t.Fatalf("unpaused: phase %s reason %q, want Progressing, starting wave w1", rm.Status.Phase, rm.Status.Reason)
	}
}

// TestPauseLetsWaveInFlightFinish: a wave already retagging is not paused.
func TestPauseLetsWaveInFlightFinish(t *testing.T) {
	c, _, _, snap := newTestController(t)
	rm := twoWaves(v1alpha1.MigrationProgressing, v1alpha1.NamespaceRestarting)
	rm.Spec.Paused = true
	_, err := c.reconcile(context.Background(), rm, snap)
	if rm.Status.Phase == v1alpha1.MigrationPaused {
		t.Fatalf("wave in flight paused: %s", rm.Status.Reason)
	}
	// It went on to drive the wave, which needs 1-28 installed (the empty
	// snapshot has none).
	if err == nil || !strings.Contains(err.Error(), "1-28 is no longer installed") {
		t.Fatalf("reconcile of a wave in flight: %v, want it to drive the wave", err)
	}
}

// TestResumeClearsHalt: a new resume token takes a Halted migration back to
// judging its wave from a fresh soak; a token seen before the halt does not.
func TestResumeClearsHalt(t *testing.T) {
	c, _, kube, snap := newTestController(t)
	ctx := context.Background()
	rm := twoWaves(v1alpha1.MigrationProgressing, v1alpha1.NamespaceReady)
	rm.Annotations = map[string]string{AnnotationResumeToken: "t1"}
	rm.Spec.Paused = true // so that the reconcile stops at the pause
	rm.Status.Namespaces[1].Phase = v1alpha1.NamespacePending
	if _, err := c.reconcile(ctx, rm, snap); err != nil {
		t.Fatal(err)
	}
	if rm.Status.ResumeToken != "t1" || rm.Status.Phase != v1alpha1.MigrationProgressing {
		t.Fatalf("token on a live migration: acked %q phase %s, want acked t1, phase unchanged", rm.Status.ResumeToken, rm.Status.Phase)
	}
	// Later the wave halts: the old token must not clear it.
	ready := metav1.NewTime(time.Unix(500, 0))
	rm.Status.Phase, rm.Status.Reason = v1alpha1.MigrationHalted, "wave w1 failed its gate: test"
	rm.Status.Namespaces[1].Phase = v1alpha1.NamespaceReady
	rm.Status.Waves[1].ReadyAt = &ready
	if _, err := c.reconcile(ctx, rm, snap); err != nil {
		t.Fatal(err)
	}
	if rm.Status.Phase != v1alpha1.MigrationHalted {
		t.Fatalf("an acknowledged token cleared a later halt: %s %q", rm.Status.Phase, rm.Status.Reason)
	}
	rm.Annotations[AnnotationResumeToken] = "t2"
	if _, err := c.reconcile(ctx, rm, snap); err != nil {
		t.Fatal(err)
	}
	if rm.Status.Phase != v1alpha1.MigrationProgressing || rm.Status.ResumeToken != "t2" || rm.Status.Waves[1].ReadyAt != nil {
		t.Fatalf("resumed halt: phase %s token %q readyAt %v, want Progressing, t2, a fresh soak", rm.Status.Phase, rm.Status.ResumeToken, rm.Status.Waves[1].ReadyAt)
	}
	if rm.Status.CurrentWave != 1 || rm.Status.Namespaces[1].Generation != 0 {
		t.Fatalf("resume moved on or restarted: wave %d, b generation %d", rm.Status.CurrentWave, rm.Status.Namespaces[1].Generation)
	}
	if n := len(kube.Actions()); n != 0 {
		t.Errorf("%d API calls to resume: %v", n, kube.Actions())
	}
}

// TestEmptyWavePassesWithoutItsGate: a wave that moved no namespace (the
// default 100% wave after a three-namespace fleet's earlier waves took
// them all) has nothing to judge and passes; a gate that holds for want of
// traffic would hold it for ever.
func TestEmptyWavePassesWithoutItsGate(t *testing.T) {
	c, _, _, snap := newTestController(t)
	judged := 0
	c.cfg.Gate = GateFunc(func(context.Context, WaveInput) (health.Verdict, error) {
		judged++
		return health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"not enough traffic"}}, nil
	})
	snap.inv.Revisions = append(snap.inv.Revisions, inventory.Revision{Name: "1-28", Version: "1.28.0", Ready: true})
	rm := twoWaves(v1alpha1.MigrationProgressing, v1alpha1.NamespaceReady)
	rm.Status.Waves = append(rm.Status.Waves, v1alpha1.ResolvedWave{Name: "100pct"})
	rm.Status.CurrentWave = 2
	if _, err := c.reconcile(context.Background(), rm, snap); err != nil {
		t.Fatal(err)
	}
	if rm.Status.Phase != v1alpha1.MigrationSucceeded || judged != 0 {
		t.Fatalf("empty last wave: phase %s %q, gate asked %d times; want Succeeded without the gate", rm.Status.Phase, rm.Status.Reason, judged)
	}
}

// TestAbortStopsARunningConformanceJob: an abort while the conformance Job
// runs records the run Failed, then deletes the Job.
func TestAbortStopsARunningConformanceJob(t *testing.T) {
	c, mc, kube, snap := newTestController(t)
	ctx := context.Background()
	snap.inv.Revisions = append(snap.inv.Revisions, inventory.Revision{Name: "1-27", Version: "1.27.3", Ready: true})
	rm := twoWaves(v1alpha1.MigrationGating, v1alpha1.NamespacePending)
	rm.Status.CurrentWave = 0
	rm.Status.Namespaces[0].Phase = v1alpha1.NamespacePending
	rm.Status.Conformance = &v1alpha1.ConformanceStatus{Step: "before-wave-0", Attempt: 1, Job: "m-conformance-1", Namespace: "qa", Outcome: v1alpha1.ConformanceRunning}
	rm.Spec.Abort = v1alpha1.AbortAll
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "qa", Name: "m-conformance-1"}}
	if _, err := kube.BatchV1().Jobs("qa").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the abort is recorded (Aborting), then carried out
		if _, err := c.reconcile(ctx, rm, snap); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kube.BatchV1().Jobs("qa").Get(ctx, "m-conformance-1", metav1.GetOptions{}); err == nil {
		t.Error("the running conformance Job outlived the abort")
	}
	failed := false
	for _, w := range mc.writes {
		failed = failed || (w.Conformance != nil && w.Conformance.Outcome == v1alpha1.ConformanceFailed)
	}
	if !failed {
		t.Error("the stopped run was never recorded Failed")
	}
	if rm.Status.Phase != v1alpha1.MigrationAborted {
		t.Errorf("phase %s %q, want Aborted", rm.Status.Phase, rm.Status.Reason)
	}
}
