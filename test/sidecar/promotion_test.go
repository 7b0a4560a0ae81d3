package sidecar

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestMigrationPromotionFromStaging: production's RevisionMigration,
// promoted from staging, waits in Pending (condition Promoted False,
// WaitingForUpstream), nothing moved, while staging cannot be read (with
// the error), while staging has no migration succeeded to the same istiod
// version, and while one to it is Halted there; it starts once staging's
// migration to it succeeded more than soakAfter ago, and succeeds.
func TestMigrationPromotionFromStaging(t *testing.T) {
	staging, prod := start(t, 3, "1.27.3", "1.28.1"), start(t, 3, "1.27.3", "1.28.1")
	ctx := prod.ctx
	testkit.PromotionSecrets(t, prod.c.Client, "default", staging.c.Kubeconfig, staging.c.Config.Host)
	for _, e := range []*env{staging, prod} {
		e.namespace("shop", map[string]string{"istio.io/rev": "1-27"}, app{name: "web", replicas: 1})
		e.allOn(2*time.Minute, "1.27.3", 1, "shop")
	}
	migration := func(name string, promotion *v1alpha1.PromotionSpec) *v1alpha1.RevisionMigration {
		return &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.RevisionMigrationSpec{
			From: "1-27", To: "1-28", Waves: []v1alpha1.Wave{{Name: "all", Percent: ptr(int32(100))}},
			RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}, Promotion: promotion}}
	}
	prod.controllerWith(revisions.Config{Namespace: "default"}, prod.c.Config)
	// Longer than the controller reuses an upstream's answer (10s), so the
	// wait for the soak is seen.
	const soakAfter = 15 * time.Second

	// An upstream that cannot be read holds the migration, with its error.
	if _, err := prod.mc.Create(ctx, migration("to-1-28", &v1alpha1.PromotionSpec{
		Upstreams: []v1alpha1.Upstream{{Name: "staging", KubeconfigSecret: testkit.GoneSecret}},
		SoakAfter: &v1alpha1.Duration{Duration: soakAfter}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prod.waitHeld("to-1-28", "cannot read upstream staging:", "connection refused")

	// Staging, read: no migration there yet.
	prod.patch("to-1-28", `{"spec":{"promotion":{"upstreams":[{"name":"staging","kubeconfigSecret":"`+testkit.UpstreamSecret+`"}]}}}`)
	prod.waitHeld("to-1-28", "upstream staging: no RevisionMigration has succeeded to istiod version 1.28.1")

	// A migration to 1.28.1 Halted in staging (its status as the
	// controller writes a halt) keeps production waiting.
	halted, err := staging.mc.Create(ctx, migration("halted", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	halted.Status.Phase, halted.Status.ToVersion = v1alpha1.MigrationHalted, "1.28.1"
	halted.Status.Reason = "wave all failed its gate: revision 1-28: 12 xDS rejects (lds) in the wave's soak, 0 on 1-27"
	if _, err := staging.mc.UpdateStatus(ctx, halted, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	prod.waitHeld("to-1-28", "upstream staging: RevisionMigration halted to 1.28.1 is Halted", "xDS rejects")
	if err := staging.mc.Delete(ctx, "halted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Staging migrates to 1.28.1 and succeeds: production waits out
	// soakAfter from then, then starts and succeeds.
	staging.controller(nil)
	if _, err := staging.mc.Create(ctx, migration("rehearsal", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := staging.waitPhase("rehearsal", 2*time.Minute, v1alpha1.MigrationSucceeded, v1alpha1.MigrationHalted, v1alpha1.MigrationRefused)
	if done.Status.Phase != v1alpha1.MigrationSucceeded || done.Status.ToVersion != "1.28.1" || done.Status.CompletedAt == nil {
		t.Fatalf("staging: %s (%s), toVersion %q, completedAt %v: want Succeeded to 1.28.1 with its time", done.Status.Phase, done.Status.Reason, done.Status.ToVersion, done.Status.CompletedAt)
	}
	prod.waitHeld("to-1-28", "upstream staging: RevisionMigration rehearsal succeeded to 1.28.1 ", " ago; promotion waits until ")
	got := prod.waitPhase("to-1-28", 2*time.Minute, v1alpha1.MigrationSucceeded, v1alpha1.MigrationHalted, v1alpha1.MigrationRefused)
	if got.Status.Phase != v1alpha1.MigrationSucceeded || got.Status.StartedAt == nil || got.Status.StartedAt.Time.Before(done.Status.CompletedAt.Add(soakAfter)) {
		t.Fatalf("production: %s (%s) started %v, staging succeeded %v: want Succeeded, started soakAfter (%s) after staging succeeded",
			got.Status.Phase, got.Status.Reason, got.Status.StartedAt, done.Status.CompletedAt, soakAfter)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, revisions.ConditionPromoted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("production's Promoted condition %+v, want True once started", c)
	}
	prod.allOn(time.Minute, "1.28.1", 1, "shop")
}

// waitHeld waits until the migration is Pending for promotion, its reason
// holding every part, its Promoted condition False (WaitingForUpstream)
// with the same words, and nothing moved.
func (e *env) waitHeld(name string, parts ...string) {
	e.t.Helper()
	testkit.WaitFor(e.t, time.Minute, fmt.Sprintf("%s held with %q", name, parts), func() (bool, error) {
		rm := e.migration(name)
		st := rm.Status
		if st.Phase != v1alpha1.MigrationPending || len(st.Namespaces) > 0 || st.StartedAt != nil {
			if st.Phase != v1alpha1.MigrationPending && st.Phase != "" {
				e.t.Fatalf("%s: %s (%s), %d namespaces: want it held in Pending", name, st.Phase, st.Reason, len(st.Namespaces))
			}
			return false, fmt.Errorf("phase %q", st.Phase)
		}
		c := meta.FindStatusCondition(st.Conditions, revisions.ConditionPromoted)
		for _, p := range parts {
			if !strings.Contains(st.Reason, p) || c == nil || c.Status != metav1.ConditionFalse || c.Reason != "WaitingForUpstream" || !strings.Contains(c.Message, p) {
				return false, fmt.Errorf("reason %q, Promoted %+v", st.Reason, c)
			}
		}
		return strings.HasPrefix(st.Reason, "waiting for promotion: "), fmt.Errorf("reason %q", st.Reason)
	})
}
