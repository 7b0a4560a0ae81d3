package podage

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestScheduleTellsATeamWhenAndWhere: a team's noticed workloads restart
// once the first notice runs out, moved to the policy's next window; a
// team with nothing waiting, or only restarted or opted-out workloads,
// gets no line.
func TestScheduleTellsATeamWhenAndWhere(t *testing.T) {
	sent := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	p := v1alpha1.PodAgePolicy{ObjectMeta: metav1.ObjectMeta{Name: "age"}, Spec: v1alpha1.PodAgePolicySpec{
		MaxAge:             &v1alpha1.Duration{Duration: 720 * time.Hour},
		Notice:             &v1alpha1.Duration{Duration: 48 * time.Hour},
		RateLimit:          v1alpha1.PodAgeRateLimit{PodsPerSecond: 1},
		MaintenanceWindows: []v1alpha1.MaintenanceWindow{{Start: "22:00", End: "04:00", TimeZone: "UTC"}},
	}}
	p.Status.Workloads = []v1alpha1.PodAgeWorkload{
		{Namespace: "shop", Kind: "Deployment", Name: "cart", Team: "payments", State: v1alpha1.WorkloadNoticed, NoticeSentAt: sent(12 * time.Hour)},
		{Namespace: "shop", Kind: "Deployment", Name: "pay", Team: "payments", State: v1alpha1.WorkloadBlocked, NoticeSentAt: sent(time.Hour)},
		{Namespace: "web", Kind: "Deployment", Name: "front", Team: "web", State: v1alpha1.WorkloadRestarted},
		{Namespace: "web", Kind: "Deployment", Name: "legacy", Team: "web", State: v1alpha1.WorkloadOptedOut},
	}
	// cart's notice runs out on Wednesday at 00:00, inside the night window.
	want := "the platform will restart 2 workloads from 2026-12-09 00:00 UTC, within its windows: every day 22:00–04:00 UTC (crosses midnight) (PodAgePolicy age)"
	if got := Schedule(p, "payments", now); got != want {
		t.Errorf("payments: %q, want %q", got, want)
	}
	if got := Schedule(p, "web", now); got != "" {
		t.Errorf("web (restarted and opted out only): %q, want none", got)
	}
	// Its notice ran out at noon, outside the window: from the window's opening.
	p.Status.Workloads[0].NoticeSentAt = sent(60 * time.Hour)
	if got := Schedule(p, "payments", now); !strings.Contains(got, "from 2026-12-07 22:00 UTC") {
		t.Errorf("payments, notice run out outside the window: %q, want from the window's opening at 22:00", got)
	}
	p.Spec.Paused = true
	if got := Schedule(p, "payments", now); !strings.HasSuffix(got, "; the policy is paused") {
		t.Errorf("paused policy: %q, want it to say so", got)
	}
}
