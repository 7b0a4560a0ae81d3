package revisions

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func p32(n int32) *int32 { return &n }

func candidates(n int) []Candidate {
	var out []Candidate
	for i := 0; i < n; i++ {
		// tiers 1..3, listed in reverse to prove ordering.
		tier := fmt.Sprint(3 - i%3)
		out = append(out, Candidate{Name: fmt.Sprintf("ns-%02d", i), Labels: map[string]string{v1alpha1.DefaultTierLabel: tier}})
	}
	return out
}

func TestResolveDefaultWaves(t *testing.T) {
	waves := Resolve(DefaultWaves(), v1alpha1.DefaultTierLabel, candidates(30))
	sizes := []int{}
	seen := map[string]bool{}
	for _, w := range waves {
		sizes = append(sizes, len(w.Namespaces))
		for _, ns := range w.Namespaces {
			if seen[ns] {
				t.Fatalf("%s in two waves", ns)
			}
			seen[ns] = true
		}
	}
	// 1% of 30 rounds up to 1 (the canary), 5% to 2, 30% to 9, 100% to 30: cumulative.
	if fmt.Sprint(sizes) != "[1 1 7 21]" {
		t.Fatalf("wave sizes %v, want [1 1 7 21]", sizes)
	}
	if waves[0].Namespaces[0] != "ns-02" {
		t.Fatalf("canary %s, want the first tier-1 namespace ns-02", waves[0].Namespaces[0])
	}
	// All tier-1 namespaces (10) precede tier 2 and 3: waves 1-3 hold 9 namespaces, all tier 1.
	for _, w := range waves[:3] {
		for _, ns := range w.Namespaces {
			var i int
			fmt.Sscanf(ns, "ns-%d", &i)
			if 3-i%3 != 1 {
				t.Fatalf("%s (tier %d) moved before tier 1 finished", ns, 3-i%3)
			}
		}
	}
}

func TestResolveSmallFleet(t *testing.T) {
	// 10 namespaces: 1% and 5% both round to 1, 30% to 3; no wave is empty.
	var sizes []int
	for _, w := range Resolve(DefaultWaves(), v1alpha1.DefaultTierLabel, candidates(10)) {
		sizes = append(sizes, len(w.Namespaces))
	}
	if fmt.Sprint(sizes) != "[1 1 1 7]" {
		t.Fatalf("wave sizes %v, want [1 1 1 7]", sizes)
	}
	var one []int
	for _, w := range Resolve(DefaultWaves(), v1alpha1.DefaultTierLabel, candidates(1)) {
		one = append(one, len(w.Namespaces))
	}
	if fmt.Sprint(one) != "[1 0 0 0]" {
		t.Fatalf("one namespace: %v", one)
	}
}

func TestResolveSelectors(t *testing.T) {
	waves := []v1alpha1.Wave{
		{Name: "t1", NamespaceSelector: &v1alpha1.WaveSelector{MatchLabels: map[string]v1alpha1.LabelValue{v1alpha1.DefaultTierLabel: "1"}}},
		{Name: "t2", NamespaceSelector: &v1alpha1.WaveSelector{MatchLabels: map[string]v1alpha1.LabelValue{v1alpha1.DefaultTierLabel: "2"}}},
		{Name: "rest", Percent: p32(100)},
	}
	got := Resolve(waves, v1alpha1.DefaultTierLabel, candidates(9))
	if len(got[0].Namespaces) != 3 || len(got[1].Namespaces) != 3 || len(got[2].Namespaces) != 3 {
		t.Fatalf("waves %+v", got)
	}
}

func TestValidate(t *testing.T) {
	good := v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}}
	if err := Validate(Defaulted(good)); err != nil {
		t.Fatal(err)
	}
	sel := func(k, v string) *v1alpha1.WaveSelector {
		return &v1alpha1.WaveSelector{MatchLabels: map[string]v1alpha1.LabelValue{k: v1alpha1.LabelValue(v)}}
	}
	for name, tc := range map[string]struct {
		mut  func(*v1alpha1.RevisionMigrationSpec)
		want string
	}{
		"zero rate":        {func(s *v1alpha1.RevisionMigrationSpec) { s.RateLimit.PodsPerSecond = 0 }, "podsPerSecond must be greater than 0"},
		"same revs":        {func(s *v1alpha1.RevisionMigrationSpec) { s.To = "1-27" }, "different revisions"},
		"default tag":      {func(s *v1alpha1.RevisionMigrationSpec) { s.Tag = "default" }, "default tag"},
		"stable default":   {func(s *v1alpha1.RevisionMigrationSpec) { s.StableTag = "default" }, "stableTag cannot be the default tag"},
		"stable is canary": {func(s *v1alpha1.RevisionMigrationSpec) { s.StableTag = "canary" }, "stableTag must differ from tag, from and to"},
		"stable is to":     {func(s *v1alpha1.RevisionMigrationSpec) { s.StableTag = "1-28" }, "stableTag must differ from tag, from and to"},
		"overlap same": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waves = []v1alpha1.Wave{{Name: "a", NamespaceSelector: sel("tier", "1")}, {Name: "b", NamespaceSelector: sel("tier", "1")}}
		}, "overlap"},
		"overlap keys": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waves = []v1alpha1.Wave{{Name: "a", NamespaceSelector: sel("tier", "1")}, {Name: "b", NamespaceSelector: sel("team", "x")}}
		}, "overlap"},
		"both": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waves = []v1alpha1.Wave{{Name: "a", NamespaceSelector: sel("t", "1"), Percent: p32(5)}}
		}, "exactly one"},
		"decreasing": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waves = []v1alpha1.Wave{{Name: "a", Percent: p32(30)}, {Name: "b", Percent: p32(5)}}
		}, "strictly increase"},
		"weights on sidecars": {func(s *v1alpha1.RevisionMigrationSpec) { s.WaypointCanaryWeights = []int32{50, 100} }, "waypointCanaryWeights is for a waypoints: Only migration"},
		"weights repeat": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waypoints, s.WaypointCanaryWeights = v1alpha1.WaypointsOnly, []int32{50, 50, 100}
		}, "waypointCanaryWeights must strictly increase"},
		"weights short of 100": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waypoints, s.WaypointCanaryWeights = v1alpha1.WaypointsOnly, []int32{10, 50}
		}, "must end at 100"},
		"weight 0": {func(s *v1alpha1.RevisionMigrationSpec) {
			s.Waypoints, s.WaypointCanaryWeights = v1alpha1.WaypointsOnly, []int32{0, 100}
		}, "0 is not a percentage 1..100"},
	} {
		t.Run(name, func(t *testing.T) {
			s := good
			tc.mut(&s)
			err := Validate(s)
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	wp := good
	wp.Waypoints = v1alpha1.WaypointsOnly
	if d := Defaulted(wp); Validate(d) != nil || fmt.Sprint(d.WaypointCanaryWeights) != "[10 50 100]" {
		t.Fatalf("a waypoints: Only migration defaults to weights %v (%v), want [10 50 100]", d.WaypointCanaryWeights, Validate(d))
	}
	disjoint := good
	disjoint.Waves = []v1alpha1.Wave{{Name: "a", NamespaceSelector: sel("tier", "1")}, {Name: "b", NamespaceSelector: sel("tier", "2")}}
	if err := Validate(disjoint); err != nil {
		t.Fatalf("disjoint selectors rejected: %v", err)
	}
}

func TestBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	b := newBucket(4, t0)
	if ok, _ := b.take(1, t0); ok {
		t.Fatal("a fresh bucket must start empty (no burst after a restart)")
	}
	// Over 10 s at 4 pods/s, with workloads of 2 pods tried every 10 ms, at
	// most 4*10 + burst(4) pods go.
	n := 0
	for ms := 0; ms <= 10000; ms += 10 {
		if ok, _ := b.take(2, t0.Add(time.Duration(ms)*time.Millisecond)); ok {
			n += 2
		}
	}
	if n > 44 || n < 36 {
		t.Fatalf("%d pods in 10 s at 4/s", n)
	}
	// A workload larger than the burst still goes once the bucket is full.
	b = newBucket(2, t0)
	if ok, _ := b.take(10, t0.Add(time.Second)); !ok {
		t.Fatal("a large workload never fits")
	}
	if ok, wait := b.take(1, t0.Add(2*time.Second)); ok || wait < 3*time.Second {
		t.Fatalf("debt not honoured: ok=%v wait=%s", ok, wait)
	}
}

func TestPDBBlock(t *testing.T) {
	pdb := policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1},
	}
	web := workload{Kind: "Deployment", Namespace: "a", Name: "web", Pods: 4, TemplateLabels: map[string]string{"app": "web"}, MaxUnavailable: 1}
	if why := pdbBlock([]policyv1.PodDisruptionBudget{pdb}, web, nil, "s"); why != "" {
		t.Fatalf("blocked with room: %s", why)
	}
	web.MaxUnavailable = 2
	if why := pdbBlock([]policyv1.PodDisruptionBudget{pdb}, web, nil, "s"); !strings.Contains(why, "allows 1") {
		t.Fatalf("rollout of 2 at once under a budget of 1 not blocked: %q", why)
	}
	surge := web
	surge.MaxUnavailable = 0
	pdb.Status.DisruptionsAllowed = 0
	if why := pdbBlock([]policyv1.PodDisruptionBudget{pdb}, surge, nil, "s"); why != "" {
		t.Fatalf("surge-only rollout blocked: %s", why)
	}
	other := workload{Kind: "Deployment", Namespace: "a", Name: "web-canary", TemplateLabels: map[string]string{"app": "web"}, Stamp: "s"}
	if why := pdbBlock([]policyv1.PodDisruptionBudget{pdb}, surge, []workload{other}, "s"); !strings.Contains(why, "waiting for") {
		t.Fatalf("two restarts under one budget at once: %q", why)
	}
}
