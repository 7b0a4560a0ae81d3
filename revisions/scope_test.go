package revisions

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
)

func TestScopeOf(t *testing.T) {
	inv := inventory.Inventory{Tags: map[string]string{"default": "1-27", "prod": "1-27", "old": "1-26"}}
	ns := func(name string, labels map[string]string) corev1.Namespace {
		return corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	pod := func(ns, name string, sidecar bool, labels map[string]string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app:1"}}
		if sidecar {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "istio-proxy", Image: "docker.io/istio/proxyv2:1.27.3"})
			p.Annotations = map[string]string{"sidecar.istio.io/status": `{"revision":"1-27"}`}
		}
		return p
	}
	namespaces := []corev1.Namespace{
		ns("explicit", map[string]string{"istio.io/rev": "1-27"}),
		ns("via-tag", map[string]string{"istio.io/rev": "prod"}),
		ns("on-tag", map[string]string{"istio.io/rev": "canary"}),
		ns("other", map[string]string{"istio.io/rev": "old"}),
		ns("legacy", map[string]string{"istio-injection": "enabled"}),
		ns("both", map[string]string{"istio-injection": "enabled", "istio.io/rev": "1-27"}),
		ns("disabled", map[string]string{"istio-injection": "disabled"}),
		ns("disabled-rev", map[string]string{"istio-injection": "disabled", "istio.io/rev": "1-27"}),
		ns("bare", nil),
		ns("bare-optin", nil),
		ns("bare-mixed", nil),
		ns("bare-empty", nil),
		ns("ambient", map[string]string{"istio.io/rev": "1-27", "istio.io/dataplane-mode": "ambient"}),
		ns("istio-system", map[string]string{"istio-injection": "enabled"}),
	}
	pods := map[string][]corev1.Pod{
		"bare":       {pod("bare", "a", true, nil), pod("bare", "b", false, map[string]string{"sidecar.istio.io/inject": "false"})},
		"bare-optin": {pod("bare-optin", "a", true, map[string]string{"sidecar.istio.io/inject": "true"})},
		"bare-mixed": {pod("bare-mixed", "a", true, nil), pod("bare-mixed", "job", false, nil)},
		"bare-empty": {pod("bare-empty", "a", false, nil)},
	}
	spec := v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28"}
	sc := ScopeOf(spec, inv, namespaces, pods, "istio-system")
	got := map[string]string{}
	for _, m := range sc.Members {
		got[m.Name] = m.Change("canary")
		if m.Implicit != "" {
			got[m.Name] += " (adopted)"
		}
	}
	want := map[string]string{
		"explicit": "istio.io/rev=1-27 -> istio.io/rev=canary",
		"via-tag":  "istio.io/rev=prod -> istio.io/rev=canary",
		"legacy":   "istio-injection=enabled -> istio.io/rev=canary (adopted)",
		"both":     "istio-injection=enabled,istio.io/rev=1-27 -> istio.io/rev=canary (adopted)",
		"bare":     "no label -> istio.io/rev=canary (adopted)",
	}
	if len(got) != len(want) {
		t.Errorf("members %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("member %s: %q, want %q", k, got[k], v)
		}
	}
	skipped := map[string]string{}
	for _, s := range sc.Skipped {
		skipped[s.Name] = s.Reason
	}
	for name, why := range map[string]string{
		"disabled":     "istio-injection=disabled: the namespace opted out",
		"disabled-rev": "istio-injection=disabled: the namespace opted out",
		"bare-optin":   "pod a is labelled sidecar.istio.io/inject=true",
		"bare-mixed":   "pod job has no sidecar",
	} {
		if !strings.Contains(skipped[name], why) {
			t.Errorf("skipped %s: %q, want it to say %q", name, skipped[name], why)
		}
	}
	if len(skipped) != 4 {
		t.Errorf("skipped %v, want 4", skipped)
	}

	// Leave: implicit namespaces are reported, not moved.
	spec.ImplicitNamespaces = v1alpha1.ImplicitLeave
	sc = ScopeOf(spec, inv, namespaces, pods, "istio-system")
	if len(sc.Members) != 2 || len(sc.Skipped) != 7 {
		t.Fatalf("Leave: %d members, %d skipped: %+v", len(sc.Members), len(sc.Skipped), sc.Skipped)
	}

	// When the default tag points elsewhere, istio-injection=enabled wins
	// over an istio.io/rev naming From: reported, since moving it would not
	// move its pods.
	inv.Tags["default"] = "1-26"
	spec.ImplicitNamespaces = ""
	sc = ScopeOf(spec, inv, namespaces, pods, "istio-system")
	skipped = map[string]string{}
	for _, s := range sc.Skipped {
		skipped[s.Name] = s.Reason
	}
	if !strings.Contains(skipped["both"], "istio-injection=enabled overrides istio.io/rev=1-27") {
		t.Errorf("both under default -> 1-26: %q", skipped["both"])
	}
	for _, m := range sc.Members {
		if m.Implicit != "" {
			t.Errorf("%s adopted while the default tag points at 1-26", m.Name)
		}
	}
}

func TestRestoreState(t *testing.T) {
	orig := map[string]string{"istio-injection": "enabled"}
	if !sameOriginal(map[string]string{"istio-injection": "enabled", "team": "x"}, orig) {
		t.Error("unrelated labels must not matter")
	}
	if sameOriginal(map[string]string{"istio-injection": "enabled", "istio.io/rev": "canary"}, orig) {
		t.Error("an added istio.io/rev is a change")
	}
	if sameOriginal(map[string]string{"istio-injection": "enabled "}, orig) {
		t.Error("values compare byte for byte")
	}
	if !adoptedState(map[string]string{"istio.io/rev": "canary"}, "canary") || adoptedState(map[string]string{"istio.io/rev": "canary", "istio-injection": "enabled"}, "canary") {
		t.Error("adopted means istio.io/rev=tag and no istio-injection")
	}
	// A status written before labels were recorded restores istio.io/rev alone.
	if got := originals(&v1alpha1.NamespaceStatus{OriginalRev: "1-27"}); len(got) != 1 || got["istio.io/rev"] != "1-27" {
		t.Errorf("legacy originals %v", got)
	}
	if got := originals(&v1alpha1.NamespaceStatus{Adopted: true}); len(got) != 0 {
		t.Errorf("an adopted unlabelled namespace restores no label: %v", got)
	}
}
