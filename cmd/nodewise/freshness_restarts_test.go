package main

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestRestartsByTeamJoinsEveryPolicy: a team two policies will restart
// from gets both lines; a team none will, no entry.
func TestRestartsByTeamJoinsEveryPolicy(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	policy := func(name string) v1alpha1.PodAgePolicy {
		p := v1alpha1.PodAgePolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.PodAgePolicySpec{
			MaxAge: &v1alpha1.Duration{Duration: 720 * time.Hour}, RateLimit: v1alpha1.PodAgeRateLimit{PodsPerSecond: 1}}}
		p.Status.Workloads = []v1alpha1.PodAgeWorkload{{Namespace: "shop", Kind: "Deployment", Name: "cart", Team: "payments",
			State: v1alpha1.WorkloadNoticed, NoticeSentAt: &metav1.Time{Time: now}}}
		return p
	}
	got := restartsByTeam([]v1alpha1.PodAgePolicy{policy("a"), policy("b")}, []string{"payments", "web"}, now)
	if l := got["payments"]; strings.Count(l, "the platform will restart 1 workload from 2026-12-10 12:00 UTC") != 2 || !strings.Contains(l, "(PodAgePolicy a); the platform") {
		t.Errorf("payments: %q, want both policies' lines", l)
	}
	if _, ok := got["web"]; ok || len(got) != 1 {
		t.Errorf("teams with a line: %v, want payments only", got)
	}
}
