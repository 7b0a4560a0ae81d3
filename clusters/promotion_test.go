package clusters

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func TestPromotedDecides(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	images := []string{"istio/install-cni:1.28.1", "istio/ztunnel:1.28.1"}
	rollout := func(name string, phase v1alpha1.RolloutPhase, ago time.Duration, imgs []string, spec v1alpha1.NodeRolloutSpec) v1alpha1.NodeRollout {
		nr := v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		nr.Status.Phase = phase
		nr.Status.Targets = []v1alpha1.TargetStatus{{Namespace: "istio-system", Name: "ztunnel", Images: imgs}}
		if phase == v1alpha1.PhaseCompleted {
			nr.Status.CompletionTime = &metav1.Time{Time: now.Add(-ago)}
		}
		if phase == v1alpha1.PhaseHalted {
			nr.Status.HaltReason = "node-007: resets sent 0/s → 2.9/s"
		}
		return nr
	}
	soak := func(d time.Duration) v1alpha1.NodeRolloutSpec {
		return v1alpha1.NodeRolloutSpec{Soak: &v1alpha1.Duration{Duration: d}, Baseline: &v1alpha1.Duration{Duration: 5 * time.Minute}}
	}
	want := Want{Images: images, SoakAfter: 24 * time.Hour, Spec: soak(5 * time.Minute)}
	for _, tc := range []struct {
		name     string
		upstream []v1alpha1.NodeRollout
		want     string // "" promoted, else a part of the reason
	}{
		{"completed two days ago", []v1alpha1.NodeRollout{rollout("up", v1alpha1.PhaseCompleted, 48*time.Hour, images, soak(5*time.Minute))}, ""},
		{"nothing there", nil, "upstream staging: no NodeRollout has completed images istio/install-cni:1.28.1, istio/ztunnel:1.28.1"},
		{"other images only", []v1alpha1.NodeRollout{rollout("old", v1alpha1.PhaseCompleted, 48*time.Hour, []string{"istio/ztunnel:1.27.3"}, soak(5*time.Minute))}, "no NodeRollout has completed"},
		{"one of the two images", []v1alpha1.NodeRollout{rollout("half", v1alpha1.PhaseCompleted, 48*time.Hour, images[1:], soak(5*time.Minute))}, "no NodeRollout has completed"},
		{"completed an hour ago", []v1alpha1.NodeRollout{rollout("up", v1alpha1.PhaseCompleted, time.Hour, images, soak(5*time.Minute))}, "NodeRollout up completed these images 60m ago; promotion waits until 2026-12-08T11:00:00Z (soakAfter 24h0m0s)"},
		{"still progressing", []v1alpha1.NodeRollout{rollout("up", v1alpha1.PhaseProgressing, 0, images, soak(5*time.Minute))}, "no NodeRollout has completed"},
		{"halted since", []v1alpha1.NodeRollout{rollout("up", v1alpha1.PhaseCompleted, 48*time.Hour, images, soak(5*time.Minute)), rollout("again", v1alpha1.PhaseHalted, 0, images[1:], soak(5*time.Minute))}, "NodeRollout again of these images is Halted (node-007: resets sent"},
		{"judged with a shorter soak", []v1alpha1.NodeRollout{rollout("quick", v1alpha1.PhaseCompleted, 48*time.Hour, images, soak(time.Minute))}, "NodeRollout quick was judged more leniently (soak 1m0s < 5m0s)"},
	} {
		got := decide("staging", tc.upstream, want, now)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestStricterComparesTheJudge(t *testing.T) {
	d := func(x time.Duration) *v1alpha1.Duration { return &v1alpha1.Duration{Duration: x} }
	ours := v1alpha1.NodeRolloutSpec{Soak: d(5 * time.Minute), Baseline: d(5 * time.Minute)}
	if why := Stricter(ours, ours); why != "" {
		t.Errorf("the same judge: %q", why)
	}
	lenient := v1alpha1.NodeRolloutSpec{Soak: d(10 * time.Minute), Baseline: d(time.Minute),
		Gates: v1alpha1.GatesSpec{ControlGroup: v1alpha1.ControlGroupDisabled, Inconclusive: v1alpha1.InconclusivePass}}
	if why := Stricter(lenient, ours); why != "baseline 1m0s < 5m0s, no control group, inconclusive Pass, ours Pause" {
		t.Errorf("a more lenient judge: %q", why)
	}
	strict := v1alpha1.NodeRolloutSpec{Soak: d(time.Hour), Baseline: d(time.Hour), Gates: v1alpha1.GatesSpec{Inconclusive: v1alpha1.InconclusiveFail}}
	if why := Stricter(strict, ours); why != "" {
		t.Errorf("a stricter judge: %q", why)
	}
}
