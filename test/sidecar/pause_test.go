package sidecar

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestPauseAndResume: spec.paused set while wave tier-1 is in flight lets
// that wave finish and stops the migration before tier-2 (Paused, tier-2's
// namespace untouched); a resume (what `nodewise revision resume` patches)
// starts tier-2; its gate fails and the migration halts; a second resume
// judges tier-2 again from a fresh soak, and with the gate passing the
// migration succeeds.
func TestPauseAndResume(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx := e.ctx
	e.namespace("p-1", map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: "1"}, app{name: "web", replicas: 3})
	e.namespace("p-2", map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: "2"}, app{name: "web", replicas: 3})
	e.allOn(2*time.Minute, "1.27.3", 3, "p-1", "p-2")
	untouched := podUIDs(t, ctx, e.c.Client, "p-2")

	var mu sync.Mutex
	outcome := map[string]health.Outcome{"tier-1": health.Pass, "tier-2": health.Fail}
	var judged []string
	gate := revisions.GateFunc(func(_ context.Context, in revisions.WaveInput) (health.Verdict, error) {
		mu.Lock()
		defer mu.Unlock()
		judged = append(judged, in.Wave)
		return health.Verdict{Outcome: outcome[in.Wave], Reasons: []string{"test gate"}}, nil
	})
	e.controller(gate)
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Waves: tierWaves("1", "2"),
			RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 1}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pause while tier-1 is in flight (its namespace retagged, not yet Ready).
	testkit.WaitFor(t, 2*time.Minute, "wave tier-1 in flight", func() (bool, error) {
		rm := e.migration("p")
		if len(rm.Status.Namespaces) == 0 {
			return false, fmt.Errorf("phase %s", rm.Status.Phase)
		}
		ph := rm.Status.Namespaces[0].Phase
		return ph == v1alpha1.NamespaceRetagged || ph == v1alpha1.NamespaceRestarting, fmt.Errorf("p-1 %s", ph)
	})
	e.patch("p", string(revisions.PausePatch()))
	rm := e.waitPhase("p", 2*time.Minute, v1alpha1.MigrationPaused)
	if rm.Status.CurrentWave != 1 || !strings.Contains(rm.Status.Reason, "before wave tier-2") {
		t.Fatalf("paused at wave %d (%q), want after tier-1 finished, before tier-2", rm.Status.CurrentWave, rm.Status.Reason)
	}
	e.allOn(time.Minute, "1.28.1", 3, "p-1")
	time.Sleep(2 * time.Second) // ten reconcile intervals: tier-2 must not start
	rm = e.migration("p")
	if rm.Status.Phase != v1alpha1.MigrationPaused || rm.Status.Namespaces[1].Phase != v1alpha1.NamespacePending {
		t.Fatalf("under a pause: phase %s, p-2 %s", rm.Status.Phase, rm.Status.Namespaces[1].Phase)
	}
	if n, err := e.c.Client.CoreV1().Namespaces().Get(ctx, "p-2", metav1.GetOptions{}); err != nil || n.Labels["istio.io/rev"] != "1-27" {
		t.Fatalf("p-2 relabelled under a pause: %v %v", n.Labels, err)
	}
	if now := podUIDs(t, ctx, e.c.Client, "p-2"); len(now) != len(untouched) {
		t.Fatalf("p-2 pods changed under a pause")
	}

	e.resume("p", "r1")
	rm = e.waitPhase("p", 3*time.Minute, v1alpha1.MigrationHalted)
	if rm.Status.CurrentWave != 1 || !strings.Contains(rm.Status.Reason, "tier-2 failed its gate") {
		t.Fatalf("halt: wave %d %q", rm.Status.CurrentWave, rm.Status.Reason)
	}
	e.allOn(time.Minute, "1.28.1", 3, "p-2")
	restartedAt := rm.Status.Namespaces[1].RestartedAt

	mu.Lock()
	outcome["tier-2"] = health.Pass
	mu.Unlock()
	time.Sleep(time.Second) // a halted migration stays halted without a resume
	if rm = e.migration("p"); rm.Status.Phase != v1alpha1.MigrationHalted {
		t.Fatalf("halt cleared without a resume: %s %q", rm.Status.Phase, rm.Status.Reason)
	}
	e.resume("p", "r2")
	rm = e.waitPhase("p", 2*time.Minute, v1alpha1.MigrationSucceeded)
	if rm.Status.ResumeToken != "r2" {
		t.Errorf("acknowledged resume token %q, want r2", rm.Status.ResumeToken)
	}
	if ns := rm.Status.Namespaces[1]; ns.RestartedAt != restartedAt || ns.Generation != 1 {
		t.Errorf("p-2 restarted again by the resume: stamp %s (was %s), generation %d", ns.RestartedAt, restartedAt, ns.Generation)
	}
	mu.Lock()
	defer mu.Unlock()
	if judged[len(judged)-1] != "tier-2" || outcome["tier-2"] != health.Pass {
		t.Fatalf("gate calls %v", judged)
	}
}

// patch merge-patches the migration, as `kubectl patch --type merge` would.
func (e *env) patch(name, patch string) {
	e.t.Helper()
	if _, err := e.mc.Patch(e.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("patching %s: %v", name, err)
	}
}

// resume patches what `nodewise revision resume` does: spec.paused false and
// a new resume token.
func (e *env) resume(name, token string) {
	e.patch(name, string(revisions.ResumePatch(token)))
}
