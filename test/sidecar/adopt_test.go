package sidecar

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestAdoptImplicitKilledAtEveryStep: namespaces that use 1-27 implicitly
// (istio-injection=enabled, and istio-injection=enabled beside
// istio.io/rev=1-27, where istio-injection wins) are adopted and moved to
// 1-28 with an explicit one; istio-injection=disabled is reported and left
// alone. The controller is SIGKILLed right after every persisted step (each
// status write, label patch and workload restart), of the move and then of
// an abort, and after each death no original label is lost: a namespace's
// labels are either its originals or the moved ones, and status holds the
// originals whenever they are not on the namespace. After the abort every
// namespace's labels are its originals byte for byte and its pods are back
// on 1.27.3.
func TestAdoptImplicitKilledAtEveryStep(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client
	tier := v1alpha1.DefaultTierLabel
	original := map[string]map[string]string{
		"ad-explicit": {"istio.io/rev": "1-27", tier: "1"},
		"ad-legacy":   {"istio-injection": "enabled", tier: "2", "team": "payments"},
		"ad-both":     {"istio-injection": "enabled", "istio.io/rev": "1-27", tier: "3"},
		"ad-off":      {"istio-injection": "disabled", tier: "1"},
	}
	moved := []string{"ad-explicit", "ad-legacy", "ad-both"}
	for _, ns := range append(moved, "ad-off") {
		e.namespace(ns, maps.Clone(original[ns]), app{name: "web", replicas: 2})
		// The originals are the labels as stored, with the API server's own
		// kubernetes.io/metadata.name.
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		original[ns] = n.Labels
	}
	e.allOn(2*time.Minute, "1.27.3", 2, moved...)
	e.allOn(2*time.Minute, "", 2, "ad-off")
	offPods := podUIDs(t, ctx, cs, "ad-off")

	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "adopt"},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Tag: "next", Waves: tierWaves("1", "2", "3"),
			RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	movedLabels := func(ns string) map[string]string {
		l := maps.Clone(original[ns])
		delete(l, "istio-injection")
		l["istio.io/rev"] = "next"
		return l
	}
	// check: no original label is lost after a death.
	check := func(deaths int) {
		t.Helper()
		rm := e.migration("adopt")
		recorded := map[string]v1alpha1.NamespaceStatus{}
		for _, st := range rm.Status.Namespaces {
			recorded[st.Name] = st
		}
		for ns, want := range original {
			n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case maps.Equal(n.Labels, want):
				continue
			case ns == "ad-off":
				t.Fatalf("after death %d: the disabled namespace was relabelled: %v", deaths, n.Labels)
			case !maps.Equal(n.Labels, movedLabels(ns)):
				t.Fatalf("after death %d: %s labelled %v: neither its originals %v nor moved", deaths, ns, n.Labels, want)
			}
			st, ok := recorded[ns]
			if !ok || st.Phase == v1alpha1.NamespacePending {
				t.Fatalf("after death %d: %s relabelled while its status is %+v", deaths, ns, st)
			}
			for _, k := range []string{"istio.io/rev", "istio-injection"} {
				v, had := want[k]
				if got, has := st.OriginalLabels[k]; has != had || got != v {
					t.Fatalf("after death %d: %s records %s=%q (%t), its original is %q (%t)", deaths, ns, k, got, has, v, had)
				}
			}
		}
	}
	phase := func(p v1alpha1.MigrationPhase) func() bool {
		return func() bool {
			rm := e.migration("adopt")
			if rm.Status.Phase == v1alpha1.MigrationRefused || rm.Status.Phase == v1alpha1.MigrationHalted {
				t.Fatalf("migration %s: %s", rm.Status.Phase, rm.Status.Reason)
			}
			return rm.Status.Phase == p
		}
	}
	deaths := e.controllerUntil(8*time.Minute, phase(v1alpha1.MigrationSucceeded), check)
	t.Logf("FIGURE: the move took %d controller processes, each killed after one persisted step", deaths)

	rm := e.migration("adopt")
	// The namespace labelled both ways gets the new proxy: istio-injection,
	// which the injector's selectors prefer, is gone.
	e.allOn(time.Minute, "1.28.1", 2, moved...)
	for _, ns := range moved {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(n.Labels, movedLabels(ns)) {
			t.Errorf("%s labelled %v after the move, want %v", ns, n.Labels, movedLabels(ns))
		}
	}
	adopted := map[string]bool{}
	for _, st := range rm.Status.Namespaces {
		adopted[st.Name] = st.Adopted
	}
	if fmt.Sprint(adopted) != "map[ad-both:true ad-explicit:false ad-legacy:true]" {
		t.Errorf("adopted %v", adopted)
	}
	if len(rm.Status.Skipped) != 1 || rm.Status.Skipped[0].Name != "ad-off" || !strings.Contains(rm.Status.Skipped[0].Reason, "istio-injection=disabled") {
		t.Errorf("skipped %+v, want ad-off with its reason", rm.Status.Skipped)
	}

	e.abort("adopt", v1alpha1.AbortAll)
	deaths = e.controllerUntil(8*time.Minute, phase(v1alpha1.MigrationAborted), check)
	t.Logf("FIGURE: the abort took %d controller processes", deaths)
	for ns, want := range original {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(n.Labels, want) {
			t.Errorf("%s labelled %v after the abort, want its originals %v", ns, n.Labels, want)
		}
	}
	e.allOn(2*time.Minute, "1.27.3", 2, moved...)
	now := podUIDs(t, ctx, cs, "ad-off")
	if !maps.Equal(now, offPods) {
		t.Errorf("the disabled namespace's pods were recreated")
	}
}

// TestOldProxyAfterRestartHalts: pods recreated after their namespace moved
// that still run the old proxy (here 1-28's injector hands out 1.27.3) are a
// Fail with that reason at once, never a wave that waits forever and never
// a pass; the next wave does not start.
func TestOldProxyAfterRestartHalts(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	e.namespace("op-1", map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: "1"}, app{name: "web", replicas: 2})
	e.namespace("op-2", map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: "2"}, app{name: "web", replicas: 2})
	e.allOn(2*time.Minute, "1.27.3", 2, "op-1", "op-2")
	untouched := podUIDs(t, e.ctx, e.c.Client, "op-2")
	e.inj.SetRevision("1-28", "1.27.3")
	e.controller(nil)
	if _, err := e.mc.Create(e.ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "op"},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Tag: "next", Waves: tierWaves("1", "2"),
			RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rm := e.waitPhase("op", 2*time.Minute, v1alpha1.MigrationHalted)
	if !strings.Contains(rm.Status.Reason, "restarted onto the old proxy") || !strings.Contains(rm.Status.Reason, "proxy 1.27.3") || rm.Status.CurrentWave != 0 {
		t.Fatalf("halt at wave %d: %q", rm.Status.CurrentWave, rm.Status.Reason)
	}
	if !maps.Equal(podUIDs(t, e.ctx, e.c.Client, "op-2"), untouched) {
		t.Fatal("the second wave moved after the halt")
	}
}
