package revisions

import (
	"context"
	"strings"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
)

// TestStableTagHold: the stable tag moves to To unless a namespace the
// migration did not move would follow it: one labelled with the tag and no
// istio-injection (which would take precedence), while the tag points
// elsewhere than To.
func TestStableTagHold(t *testing.T) {
	spec := v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Tag: "canary", StableTag: "stable"}
	ns := func(name string, l map[string]string) corev1.Namespace {
		return corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	}
	nss := []corev1.Namespace{
		ns("moved", map[string]string{"istio.io/rev": "stable"}),
		ns("opted-out", map[string]string{"istio.io/rev": "stable", "istio-injection": "disabled"}),
		ns("on-rev", map[string]string{"istio.io/rev": "1-27"}),
	}
	moved := map[string]bool{"moved": true}
	for name, tc := range map[string]struct {
		tags map[string]string
		nss  []corev1.Namespace
		want string // "" or a part of the hold
	}{
		"no stable tag yet":     {map[string]string{"canary": "1-28"}, append(nss, ns("other", map[string]string{"istio.io/rev": "stable"})), ""},
		"already on To":         {map[string]string{"stable": "1-28"}, append(nss, ns("other", map[string]string{"istio.io/rev": "stable"})), ""},
		"only moved namespaces": {map[string]string{"stable": "1-27"}, nss, ""},
		"an unmoved one":        {map[string]string{"stable": "1-27"}, append(nss, ns("other", map[string]string{"istio.io/rev": "stable"})), "tag stable (-> 1-27) is still used by namespaces this migration did not move: other;"},
		"two, named in order":   {map[string]string{"stable": "1-26"}, append(nss, ns("zed", map[string]string{"istio.io/rev": "stable"}), ns("abe", map[string]string{"istio.io/rev": "stable"})), "did not move: abe,zed;"},
	} {
		t.Run(name, func(t *testing.T) {
			got := stableTagHold(spec, tc.tags, tc.nss, moved)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("hold %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAbortWaitsForABegunHandover: an abort set on a Succeeded migration
// whose stable tag already points at To (a controller stopped between the
// tag and the namespaces) finishes the handover instead of rolling back
// (the recorded labels would now lead to To), then is refused, saying how
// to go back; while the stable tag still points elsewhere, the abort runs.
func TestAbortWaitsForABegunHandover(t *testing.T) {
	url := "https://istiod-1-28.istio-system.svc:443/inject"
	none := admv1.SideEffectClassNone
	revWH := &admv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-1-28", Labels: map[string]string{istio.LabelRev: "1-28"}},
		Webhooks: []admv1.MutatingWebhook{{Name: "rev.namespace.sidecar-injector.istio.io", ClientConfig: admv1.WebhookClientConfig{URL: &url},
			SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}},
	}
	for name, tc := range map[string]struct {
		stableOn string
		passes   int
		want     v1alpha1.MigrationPhase
		label    string
	}{
		"begun":     {"1-28", 2, v1alpha1.MigrationSucceeded, "stable"},
		"not begun": {"1-27", 1, v1alpha1.MigrationAborting, "canary"}, // the abort's own work needs the revisions installed
	} {
		t.Run(name, func(t *testing.T) {
			c, _, kube, snap := newTestController(t)
			ctx := context.Background()
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{istio.LabelRev: "canary"}}}
			if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, revWH, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			snap.inv.Tags = map[string]string{"stable": tc.stableOn, "canary": "1-28"}
			rm := &v1alpha1.RevisionMigration{
				ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 2},
				Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", StableTag: "stable", Abort: v1alpha1.AbortAll,
					RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 1}},
				Status: v1alpha1.RevisionMigrationStatus{Phase: v1alpha1.MigrationSucceeded, CurrentWave: 1,
					Waves:      []v1alpha1.ResolvedWave{{Name: "w0", Namespaces: []string{"a"}}},
					Namespaces: []v1alpha1.NamespaceStatus{{Name: "a", Phase: v1alpha1.NamespaceReady, OriginalLabels: map[string]string{istio.LabelRev: "stable"}}}},
			}
			for i := 0; i < tc.passes; i++ {
				if _, err := c.reconcile(ctx, rm, snap); err != nil {
					t.Fatal(err)
				}
			}
			live, err := kube.CoreV1().Namespaces().Get(ctx, "a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rm.Status.Phase != tc.want || live.Labels[istio.LabelRev] != tc.label {
				t.Fatalf("phase %s (%s), namespace on %q; want %s, on %q", rm.Status.Phase, rm.Status.Reason, live.Labels[istio.LabelRev], tc.want, tc.label)
			}
			if tc.want == v1alpha1.MigrationSucceeded && !strings.Contains(rm.Status.Reason, "abort ignored") {
				t.Errorf("reason %q, want the abort refused", rm.Status.Reason)
			}
		})
	}
}
