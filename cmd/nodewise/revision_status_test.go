package main

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/revisions"
)

// TestMigrationStatusShowsHandover: with spec.stableTag the human view says
// where the namespaces end, and, once the controller has acted, whether the
// handover happened or what holds it (which also changes -w's key).
func TestMigrationStatusShowsHandover(t *testing.T) {
	rm := &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", StableTag: "prod"}}
	show := func() string {
		var b bytes.Buffer
		if err := writeMigrationStatus(&b, rm); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if out := show(); !strings.Contains(out, "handover to tag prod: once Succeeded") {
		t.Errorf("before: %s", out)
	}
	before := migrationKey(rm)
	meta.SetStatusCondition(&rm.Status.Conditions, metav1.Condition{Type: revisions.ConditionTagHandedOver, Status: metav1.ConditionFalse, Reason: "Held", Message: "tag prod (-> 1-27) is still used by namespaces this migration did not move: legacy"})
	if out := show(); !strings.Contains(out, "handover to tag prod: Held: tag prod (-> 1-27) is still used by namespaces this migration did not move: legacy") {
		t.Errorf("held: %s", out)
	}
	if migrationKey(rm) == before {
		t.Error("a held handover does not change the watch key: -w would not print it")
	}
	rm.Spec.StableTag = ""
	if out := show(); strings.Contains(out, "handover") {
		t.Errorf("without stableTag: %s", out)
	}
}

// TestMigrationStatusShowsConformance: the conformance gate's step, Job and
// outcome in one line, with a failure's reason; explain has the same line.
func TestMigrationStatusShowsConformance(t *testing.T) {
	rm := &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28",
		Gates: &v1alpha1.GatesSpec{Conformance: &v1alpha1.ConformanceGate{Namespace: "qa"}}}}
	var b bytes.Buffer
	if err := writeMigrationStatus(&b, rm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "conformance: Job in qa before the first step, not run yet") {
		t.Errorf("before its run: %s", b.String())
	}
	before := migrationKey(rm)
	rm.Status.Phase, rm.Status.Reason = v1alpha1.MigrationHalted, "wave canary not started: conformance Job qa/m-conformance-start-1 failed"
	rm.Status.Conformance = &v1alpha1.ConformanceStatus{Step: "start", Attempt: 1, Job: "m-conformance-start-1", Namespace: "qa",
		Outcome: v1alpha1.ConformanceFailed, Message: "conformance Job qa/m-conformance-start-1 failed: BackoffLimitExceeded; last log lines of pod p: FAIL TestMTLS"}
	want := "conformance start (attempt 1): Job qa/m-conformance-start-1 Failed: conformance Job qa/m-conformance-start-1 failed: BackoffLimitExceeded; last log lines of pod p: FAIL TestMTLS\n"
	for name, write := range map[string]func(*bytes.Buffer) error{
		"status":  func(b *bytes.Buffer) error { return writeMigrationStatus(b, rm) },
		"explain": func(b *bytes.Buffer) error { return writeWaveExplain(b, rm, "") },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), want) {
			t.Errorf("%s: %s, want the line %q", name, b.String(), want)
		}
	}
	if migrationKey(rm) == before {
		t.Error("a conformance run does not change the watch key")
	}
}

// TestMigrationStatusShowsWaypointMethod: a waypoints: Only migration's
// status says how its waypoints move: before its start, what decides; by
// canary, the current wave's weight and then its promotion (each a new
// watch key); relabelled, that and why. A sidecar migration says nothing.
func TestMigrationStatusShowsWaypointMethod(t *testing.T) {
	rm := &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "wp"}, Spec: v1alpha1.RevisionMigrationSpec{From: "1-31", To: "1-32", Waypoints: v1alpha1.WaypointsOnly}}
	show := func() string {
		var b bytes.Buffer
		if err := writeMigrationStatus(&b, rm); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if out := show(); !strings.Contains(out, "waypoints: by weighted canary 10→50→100% if istiod 1-32 and every ztunnel are 1.31+, else relabelled in place (decided at start)\n") {
		t.Errorf("before the start: %s", out)
	}
	rm.Status.WaypointMethod, rm.Status.Waves = v1alpha1.WaypointCanary, []v1alpha1.ResolvedWave{{Name: "canary", CanaryWeight: 50}}
	key := migrationKey(rm)
	if out := show(); !strings.Contains(out, "waypoints: by weighted canary 10→50→100%; wave canary at 50%\n") {
		t.Errorf("at 50%%: %s", out)
	}
	rm.Status.Waves[0].CanaryWeight, rm.Status.Waves[0].CanaryPromoted = 100, true
	if out := show(); !strings.Contains(out, "waypoints: by weighted canary 10→50→100%; wave canary promoted (primaries moving to 1-32, canaries then removed)\n") {
		t.Errorf("promoted: %s", out)
	}
	if migrationKey(rm) == key {
		t.Error("a weight step does not change the watch key: -w would not print it")
	}
	rm.Status.WaypointMethod = v1alpha1.WaypointRelabel
	if out := show(); !strings.Contains(out, "waypoints: relabelled in place (istio.io/rev=1-32 on each Gateway; weighted canaries need istiod and every ztunnel at 1.31+)\n") {
		t.Errorf("relabelled: %s", out)
	}
	rm.Spec.Waypoints = ""
	if out := show(); strings.Contains(out, "waypoints:") {
		t.Errorf("a sidecar migration: %s", out)
	}
}
