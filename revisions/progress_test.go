package revisions

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestEditOfFinishedMigrationIsObserved: a spec edit of a migration that has
// nothing left to do is written as observed (its generation, and the
// conditions of its unchanged phase), once: kstatus and Argo CD read a
// status.observedGeneration behind metadata.generation as still in progress.
func TestEditOfFinishedMigrationIsObserved(t *testing.T) {
	for _, tc := range []struct {
		phase    v1alpha1.MigrationPhase
		wantTrue string
	}{
		{v1alpha1.MigrationSucceeded, v1alpha1.ConditionReady},
		{v1alpha1.MigrationHalted, v1alpha1.ConditionStalled},
		{v1alpha1.MigrationAborted, v1alpha1.ConditionStalled},
		{v1alpha1.MigrationRefused, v1alpha1.ConditionStalled},
	} {
		c, mc, _, snap := newTestController(t)
		rm := twoWaves(tc.phase, v1alpha1.NamespaceReady)
		rm.Generation, rm.Status.ObservedGeneration, rm.Status.Reason = 2, 1, "why it is "+string(tc.phase)
		for range 2 {
			if _, err := c.reconcile(context.Background(), rm, snap); err != nil {
				t.Fatalf("%s: %v", tc.phase, err)
			}
		}
		if len(mc.writes) != 1 {
			t.Fatalf("%s: %d status writes, want 1", tc.phase, len(mc.writes))
		}
		got := mc.writes[0]
		if got.ObservedGeneration != 2 || got.Phase != tc.phase {
			t.Errorf("%s: wrote observedGeneration %d phase %s, want 2, %s", tc.phase, got.ObservedGeneration, got.Phase, tc.phase)
		}
		for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionReconciling, v1alpha1.ConditionStalled} {
			cond := meta.FindStatusCondition(got.Conditions, typ)
			if cond == nil || (cond.Status == metav1.ConditionTrue) != (typ == tc.wantTrue) || cond.Reason != string(tc.phase) || cond.ObservedGeneration != 2 {
				t.Errorf("%s: condition %s is %+v, want only %s True, reason %s, generation 2", tc.phase, typ, cond, tc.wantTrue, tc.phase)
			}
		}
		if c := meta.FindStatusCondition(got.Conditions, tc.wantTrue); c != nil && c.Message != rm.Status.Reason {
			t.Errorf("%s: %s message %q, want the phase's reason", tc.phase, tc.wantTrue, c.Message)
		}
	}
}

// TestPausedMigrationIsReconciling: Paused is Reconciling (kstatus has no
// "suspended"), with the pause's reason as its message.
func TestPausedMigrationIsReconciling(t *testing.T) {
	c, mc, _, snap := newTestController(t)
	rm := twoWaves(v1alpha1.MigrationProgressing, v1alpha1.NamespacePending)
	rm.Spec.Paused = true
	if _, err := c.reconcile(context.Background(), rm, snap); err != nil {
		t.Fatal(err)
	}
	if len(mc.writes) != 1 {
		t.Fatalf("%d status writes, want 1", len(mc.writes))
	}
	cond := meta.FindStatusCondition(mc.writes[0].Conditions, v1alpha1.ConditionReconciling)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "Paused" || cond.Message != rm.Status.Reason {
		t.Errorf("Reconciling of a paused migration: %+v, want True, Paused, %q", cond, rm.Status.Reason)
	}
	if s := meta.FindStatusCondition(mc.writes[0].Conditions, v1alpha1.ConditionStalled); s == nil || s.Status != metav1.ConditionFalse {
		t.Errorf("Stalled of a paused migration: %+v, want False", s)
	}
}
