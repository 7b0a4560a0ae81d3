package main

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/freshness"
)

// TestContractPublishesTheEnforcingPolicy: with a PodAgePolicy, the
// contract states its target (over the flags'), its windows and what it
// does; without one, it says nothing enforces the target.
func TestContractPublishesTheEnforcingPolicy(t *testing.T) {
	behind := int32(2)
	p := v1alpha1.PodAgePolicy{ObjectMeta: metav1.ObjectMeta{Name: "monthly"}, Spec: v1alpha1.PodAgePolicySpec{
		MaxAge: &v1alpha1.Duration{Duration: 30 * 24 * time.Hour}, MaxMinorsBehind: &behind, TeamKey: "squad",
		MaintenanceWindows: []v1alpha1.MaintenanceWindow{{Start: "01:00", End: "05:00", TimeZone: "UTC"}},
		RateLimit:          v1alpha1.PodAgeRateLimit{PodsPerSecond: 3},
	}}
	target, keys := policyTarget(p.Spec, freshness.Target{MaxMinorsBehind: 1}, freshness.Keys{Team: "team", Owner: "owner"})
	if target.MaxAge != 30*24*time.Hour || target.MaxMinorsBehind != 2 || keys.Team != "squad" || keys.Owner != "owner" {
		t.Fatalf("policyTarget = %+v %+v, want the policy's age, skew and team key", target, keys)
	}
	r := freshness.Report{Now: metav1.NewTime(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)), Version: "1.28.1", Target: target, MaxAge: metav1.Duration{Duration: target.MaxAge}, Keys: keys}
	var with, without strings.Builder
	if err := printContract(&with, r, []v1alpha1.PodAgePolicy{p}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"at most 2 minors behind 1.28.1", "younger than 30d", "Enforced by PodAgePolicy monthly", "01:00", "`squad` label"} {
		if !strings.Contains(with.String(), want) {
			t.Errorf("contract lacks %q:\n%s", want, with.String())
		}
	}
	if err := printContract(&without, r, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(without.String(), "No PodAgePolicy enforces the target") || strings.Contains(without.String(), "Enforced by") {
		t.Errorf("contract without a policy:\n%s", without.String())
	}
}
