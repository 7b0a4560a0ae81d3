package sidecar

import (
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/revisions/revtag"
)

// TestSkewTwoPasses: with proxies on 1.26, a move straight to 1-28 is refused
// with the reason and the two-pass plan; the planner reads the same from the
// cluster; then both passes run and every proxy ends on 1.28.1; the old
// revision still cannot be removed while a tag points at it.
func TestSkewTwoPasses(t *testing.T) {
	e := start(t, 3, "1.26.1", "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client
	e.namespace("legacy", map[string]string{"istio.io/rev": "default"}, app{name: "web", replicas: 2})
	e.namespace("current", map[string]string{"istio.io/rev": "1-27"}, app{name: "web", replicas: 2})
	e.allOn(2*time.Minute, "1.26.1", 2, "legacy")
	e.allOn(2*time.Minute, "1.27.3", 2, "current")
	e.controller(nil)

	// The planner, from the cluster's oldest proxy.
	inv, err := inventory.Observe(ctx, cs, inventory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	oldest, ok := skew.OldestSidecar(inv)
	if !ok || oldest.MinorString() != "1.26" {
		t.Fatalf("oldest sidecar %v %v", oldest, ok)
	}
	passes, err := skew.Plan(skew.DefaultPolicy(), oldest, skew.MustParse("1.28.1"))
	if err != nil || len(passes) != 2 {
		t.Fatalf("plan %+v %v", passes, err)
	}
	t.Logf("plan: 1) %s 2) %s", passes[0].Why, passes[1].Why)

	// A control-plane move that would strand the 1.26 proxies is refused, with why.
	create := func(name string, spec v1alpha1.RevisionMigrationSpec) {
		t.Helper()
		if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rate := v1alpha1.RestartRateLimit{PodsPerSecond: 5}
	create("jump", v1alpha1.RevisionMigrationSpec{From: "1-26", To: "1-28", RateLimit: rate})
	rm := e.waitPhase("jump", time.Minute, v1alpha1.MigrationRefused)
	t.Logf("refused: %s", rm.Status.Reason)
	for _, want := range []string{"legacy/", "1.26", "2 passes", "1.26 -> 1.27"} {
		if !strings.Contains(rm.Status.Reason, want) {
			t.Fatalf("refusal %q does not say %q", rm.Status.Reason, want)
		}
	}
	if tags, _ := e.proxies("legacy"); tags[firstKey(tags)] != "1.26.1" {
		t.Fatal("a refused migration touched legacy")
	}
	if _, err := revtag.Get(ctx, cs, "canary"); !errors.Is(err, revtag.ErrUnknownTag) {
		t.Fatalf("a refused migration created its tag: %v", err)
	}

	// Pass 1 then pass 2.
	create("pass1", v1alpha1.RevisionMigrationSpec{From: "1-26", To: "1-27", Tag: "step", RateLimit: rate})
	if rm := e.waitPhase("pass1", 3*time.Minute, v1alpha1.MigrationSucceeded, v1alpha1.MigrationRefused, v1alpha1.MigrationHalted); rm.Status.Phase != v1alpha1.MigrationSucceeded {
		t.Fatalf("pass 1: %s %s", rm.Status.Phase, rm.Status.Reason)
	} else if c := meta.FindStatusCondition(rm.Status.Conditions, revisions.ConditionComplete); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("pass 1 succeeded without Complete=True: %+v", rm.Status.Conditions)
	}
	if c := meta.FindStatusCondition(e.migration("jump").Status.Conditions, revisions.ConditionComplete); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Refused" {
		t.Fatalf("refused migration's Complete condition: %+v", c)
	}
	e.allOn(time.Minute, "1.27.3", 2, "legacy")
	create("pass2", v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", RateLimit: rate})
	if rm := e.waitPhase("pass2", 3*time.Minute, v1alpha1.MigrationSucceeded, v1alpha1.MigrationRefused, v1alpha1.MigrationHalted); rm.Status.Phase != v1alpha1.MigrationSucceeded {
		t.Fatalf("pass 2: %s %s", rm.Status.Phase, rm.Status.Reason)
	}
	e.allOn(time.Minute, "1.28.1", 2, "legacy", "current")

	// No proxy runs 1-26 any more, but the default tag still points at it.
	_, err = revtag.RemoveRevision(ctx, cs, nil, "1-26", inventory.Options{}, true)
	if !errors.Is(err, revtag.ErrRevisionInUse) || !strings.Contains(err.Error(), "tag default") || strings.Contains(err.Error(), "proxies") {
		t.Fatalf("removing 1-26: %v", err)
	}
	if err := revtag.Set(ctx, cs, revtag.SetOptions{Tag: "default", Revision: "1-28", Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	deleted, err := revtag.RemoveRevision(ctx, cs, nil, "1-26", inventory.Options{}, false)
	if err != nil {
		t.Fatalf("removing an unused revision: %v", err)
	}
	t.Logf("removed 1-26: %v", deleted)
	if _, err := cs.AppsV1().Deployments("istio-system").Get(ctx, "istiod-1-26", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("istiod-1-26 still there: %v", err)
	}
}

// TestBadInput: the API server rejects the objects the CLI's validation
// rejects (zero rate, overlapping selectors, ...), and the controller refuses
// what only the cluster can judge (unknown revisions).
func TestBadInput(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx := e.ctx
	e.namespace("bi", map[string]string{"istio.io/rev": "1-27"}, app{name: "web", replicas: 1})
	p := func(n int32) *int32 { return &n }
	sel := func(k, v string) *v1alpha1.WaveSelector {
		return &v1alpha1.WaveSelector{MatchLabels: map[string]v1alpha1.LabelValue{k: v1alpha1.LabelValue(v)}}
	}
	good := v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 3}}
	for name, tc := range map[string]struct {
		mut  func(*v1alpha1.RevisionMigrationSpec)
		want string
	}{
		"zero-rate": {func(s *v1alpha1.RevisionMigrationSpec) { s.RateLimit.PodsPerSecond = 0 }, "podsPerSecond must be greater than 0"},
		"overlap": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waves = []v1alpha1.Wave{{Name: "a", NamespaceSelector: sel("tier", "1")}, {Name: "b", NamespaceSelector: sel("team", "x")}}
		}, "wave namespace selectors overlap"},
		"same-labels": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waves = []v1alpha1.Wave{{Name: "a", NamespaceSelector: sel("tier", "1")}, {Name: "b", NamespaceSelector: sel("tier", "1")}}
		}, "wave namespace selectors overlap"},
		"both": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waves = []v1alpha1.Wave{{Name: "a", NamespaceSelector: sel("t", "1"), Percent: p(5)}}
		}, "exactly one of namespaceSelector or percent"},
		"decreasing": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waves = []v1alpha1.Wave{{Name: "a", Percent: p(30)}, {Name: "b", Percent: p(5)}}
		}, "percent waves must strictly increase"},
		"same-rev":         {func(s *v1alpha1.RevisionMigrationSpec) { s.To = "1-27" }, "from and to must be different revisions"},
		"default-tag":      {func(s *v1alpha1.RevisionMigrationSpec) { s.Tag = "default" }, "the default tag is not a migration tag"},
		"stable-default":   {func(s *v1alpha1.RevisionMigrationSpec) { s.StableTag = "default" }, "stableTag cannot be the default tag"},
		"stable-is-canary": {func(s *v1alpha1.RevisionMigrationSpec) { s.StableTag = "canary" }, "stableTag must differ from tag, from and to"},
		"stable-is-from":   {func(s *v1alpha1.RevisionMigrationSpec) { s.StableTag = "1-27" }, "stableTag must differ from tag, from and to"},
		"waypoints-stable": {func(s *v1alpha1.RevisionMigrationSpec) { s.Waypoints, s.StableTag = v1alpha1.WaypointsOnly, "stable" }, "a waypoints: Only migration has none"},
		"waypoints-mode":   {func(s *v1alpha1.RevisionMigrationSpec) { s.Waypoints = "Include" }, "supported values"},
		"weights-sidecar":  {func(s *v1alpha1.RevisionMigrationSpec) { s.WaypointCanaryWeights = []int32{50, 100} }, "waypointCanaryWeights is for a waypoints: Only migration"},
		"weights-order": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waypoints, s.WaypointCanaryWeights = v1alpha1.WaypointsOnly, []int32{50, 50, 100}
		}, "waypointCanaryWeights must strictly increase"},
		"weights-end": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waypoints, s.WaypointCanaryWeights = v1alpha1.WaypointsOnly, []int32{10, 50}
		}, "waypointCanaryWeights must end at 100"},
		"weights-range": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waypoints, s.WaypointCanaryWeights = v1alpha1.WaypointsOnly, []int32{0, 100}
		}, "should be greater than or equal to 1"},
	} {
		s := good
		tc.mut(&s)
		_, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: s}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: API server said %v, want Invalid with %q", name, err, tc.want)
		}
	}
	// Disjoint selectors are accepted.
	ok := good
	ok.Waves = []v1alpha1.Wave{{Name: "a", NamespaceSelector: sel("tier", "1")}, {Name: "b", NamespaceSelector: sel("tier", "2")}, {Name: "rest", Percent: p(100)}}
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "ok"}, Spec: ok}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("valid migration rejected: %v", err)
	}
	// Unknown revisions cannot be CEL: the controller refuses, naming the installed ones.
	unknown := good
	unknown.To = "1-99"
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "unknown"}, Spec: unknown}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Two live migrations never share a namespace. ok, m1 and m2 all cover
	// bi: whichever the controller starts first takes it (the work queue
	// does not promise an order), and the others are refused, naming it.
	for _, name := range []string{"m1", "m2"} {
		if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: good}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.controller(nil)
	var winner string
	ends := map[string]*v1alpha1.RevisionMigration{}
	for _, name := range []string{"ok", "m1", "m2"} {
		ends[name] = e.waitPhase(name, time.Minute, v1alpha1.MigrationRefused, v1alpha1.MigrationSucceeded)
		if ends[name].Status.Phase == v1alpha1.MigrationSucceeded {
			if winner != "" {
				t.Fatalf("%s and %s both Succeeded on namespace bi", winner, name)
			}
			winner = name
		}
	}
	for name, rm := range ends {
		if winner == "" || (name != winner && !strings.Contains(rm.Status.Reason, "namespace bi belongs to RevisionMigration "+winner)) {
			t.Fatalf("%s: %s %q: want one of ok, m1, m2 Succeeded (got %q) and the others Refused naming it", name, rm.Status.Phase, rm.Status.Reason, winner)
		}
	}
	rm := e.waitPhase("unknown", time.Minute, v1alpha1.MigrationRefused)
	if !strings.Contains(rm.Status.Reason, `unknown revision "1-99"`) || !strings.Contains(rm.Status.Reason, "1-27, 1-28") {
		t.Fatalf("refusal %q", rm.Status.Reason)
	}
	// The refusal is also an Event (Warning) with the same reason.
	for {
		select {
		case ev := <-e.events.Events:
			if strings.HasPrefix(ev, "Warning Refused") && strings.Contains(ev, `unknown revision "1-99"`) {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no Warning Refused event for the unknown revision")
		}
	}
}
