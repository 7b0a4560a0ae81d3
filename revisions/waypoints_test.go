package revisions

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
)

// TestWaypointScope: a waypoint is on the revision its Gateway's
// istio.io/rev names, else its namespace's, else the default tag's, a tag
// resolved; the scope keeps the namespaces with a waypoint on from and
// records each Gateway's own label ("" when it has none).
func TestWaypointScope(t *testing.T) {
	gw := func(ns, name, rev string) unstructured.Unstructured {
		u := unstructured.Unstructured{Object: map[string]any{}}
		u.SetNamespace(ns)
		u.SetName(name)
		if rev != "" {
			u.SetLabels(map[string]string{istio.LabelRev: rev})
		}
		return u
	}
	ns := func(name, rev string) corev1.Namespace {
		n := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tier": name}}}
		if rev != "" {
			n.Labels[istio.LabelRev] = rev
		}
		return n
	}
	tags := map[string]string{"default": "1-27", "prod": "1-27", "canary": "1-28"}
	gws := []unstructured.Unstructured{
		gw("own", "waypoint", "1-27"),     // its own label
		gw("tagged", "waypoint", "prod"),  // a tag on the Gateway
		gw("bynamespace", "waypoint", ""), // the namespace's label
		gw("bydefault", "waypoint", ""),   // the default tag
		gw("bydefault", "reviews", "1-28"),
		gw("moved", "waypoint", ""), // the namespace on canary
	}
	nss := []corev1.Namespace{ns("own", ""), ns("tagged", ""), ns("bynamespace", "1-27"), ns("bydefault", ""), ns("moved", "canary")}
	cands, moved := waypointScope(gws, nss, tags, "1-27")
	got := fmt.Sprint(len(cands), moved)
	want := "4 map[bydefault:map[waypoint:] bynamespace:map[waypoint:] own:map[waypoint:1-27] tagged:map[waypoint:prod]]"
	if got != want {
		t.Fatalf("scope\n got %s\nwant %s", got, want)
	}
	if cands[0].Name != "bydefault" || cands[0].Labels["tier"] != "bydefault" {
		t.Fatalf("candidates carry their namespace's labels (for tiers): %+v", cands[0])
	}
}

func TestValidateWaypoints(t *testing.T) {
	good := v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}, Waypoints: v1alpha1.WaypointsOnly}
	if err := Validate(Defaulted(good)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*v1alpha1.RevisionMigrationSpec){
		func(s *v1alpha1.RevisionMigrationSpec) { s.StableTag = "stable" },
		func(s *v1alpha1.RevisionMigrationSpec) { s.Waypoints = "Include" },
	} {
		s := good
		bad(&s)
		if err := Validate(Defaulted(s)); err == nil {
			t.Errorf("accepted %+v", s)
		}
	}
}

// TestNextWeight: a passed weight moves the wave to the next larger weight
// of the spec, from a fresh soak, and after the last to the promotion; a
// weight no longer in an edited spec moves to the next larger one.
func TestNextWeight(t *testing.T) {
	spec := v1alpha1.RevisionMigrationSpec{WaypointCanaryWeights: []int32{10, 50, 100}}
	for _, tc := range []struct {
		at       int32
		want     int32
		promoted bool
	}{{10, 50, false}, {50, 100, false}, {30, 50, false}, {100, 100, true}} {
		now := metav1.Now()
		w := v1alpha1.ResolvedWave{Name: "canary", CanaryWeight: tc.at, ReadyAt: &now}
		reason := nextWeight(spec, &w)
		if w.CanaryWeight != tc.want || w.CanaryPromoted != tc.promoted || w.ReadyAt != nil {
			t.Errorf("after %d%%: weight %d, promoted %t, readyAt %v; want %d, %t, a fresh soak", tc.at, w.CanaryWeight, w.CanaryPromoted, w.ReadyAt, tc.want, tc.promoted)
		}
		if want := fmt.Sprintf("wave canary: waypoint canary at %d%% passed", tc.at); reason[:len(want)] != want {
			t.Errorf("reason %q, want it to start %q", reason, want)
		}
	}
}

// TestCanaryName: <primary>-<to>, the primary cut so the name stays a
// label value (istiod names the Deployment after it).
func TestCanaryName(t *testing.T) {
	if got := canaryName("waypoint", "1-32"); got != "waypoint-1-32" {
		t.Errorf("canaryName = %q", got)
	}
	long := fmt.Sprintf("%063d", 0)
	if got := canaryName(long, "1-32"); len(got) != 63 || got[58:] != "-1-32" {
		t.Errorf("canaryName of a 63-character Gateway = %q (%d characters)", got, len(got))
	}
}
