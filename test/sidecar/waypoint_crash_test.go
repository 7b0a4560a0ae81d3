package sidecar

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/test/testkit"
)

// gatewayHistory records, from a watch, each waypoint Gateway's istio.io/rev
// values in order ("" for none), a value repeated only after another.
type gatewayHistory struct {
	mu   sync.Mutex
	revs map[string][]string // namespace/name
}

// watchGateways lists the Gateways, then records every change of their
// istio.io/rev until the test ends.
func (w *waypointFake) watchGateways() *gatewayHistory {
	w.e.t.Helper()
	h := &gatewayHistory{revs: map[string][]string{}}
	list, err := w.dyn.Resource(gatewaysGVR).List(w.e.ctx, metav1.ListOptions{})
	if err != nil {
		w.e.t.Fatal(err)
	}
	for i := range list.Items {
		h.add(&list.Items[i])
	}
	wi, err := w.dyn.Resource(gatewaysGVR).Watch(w.e.ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		w.e.t.Fatal(err)
	}
	w.e.t.Cleanup(wi.Stop)
	go func() {
		for ev := range wi.ResultChan() {
			if g, ok := ev.Object.(*unstructured.Unstructured); ok {
				h.add(g)
			}
		}
	}()
	return h
}

func (h *gatewayHistory) add(g *unstructured.Unstructured) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key, rev := g.GetNamespace()+"/"+g.GetName(), g.GetLabels()[istio.LabelRev]
	if r := h.revs[key]; len(r) == 0 || r[len(r)-1] != rev {
		h.revs[key] = append(r, rev)
	}
}

// of is a Gateway's history so far.
func (h *gatewayHistory) of(key string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.revs[key])
}

// TestWaypointWavesKilledAtEveryStep: a waypoints: Only migration (wp-1's
// Gateway labelled 1-27, wp-2's unlabelled and on 1-27 by the default tag,
// one wave each) survives a controller killed right after every persisted
// step (each status write and each Gateway patch), and so does its abort.
// After every death, a Gateway on 1-28 has its original label recorded in
// status; the migration succeeds with each Gateway moved once (1-27 or none,
// then 1-28), and the abort puts each back once on its original label.
func TestWaypointWavesKilledAtEveryStep(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	wp := e.waypoints(map[string]string{"1-27": "1.27.3", "1-28": "1.28.1"})
	original := map[string]string{"wp-1": "1-27", "wp-2": ""}
	for i, ns := range []string{"wp-1", "wp-2"} {
		e.namespace(ns, map[string]string{istio.LabelDataplaneMode: istio.DataplaneModeAmbient, istio.LabelUseWaypoint: "waypoint", v1alpha1.DefaultTierLabel: fmt.Sprint(i + 1)})
		wp.gateway(ns, "waypoint", original[ns])
	}
	wp.run()
	waypointsOn := func(version string) {
		t.Helper()
		testkit.WaitFor(t, time.Minute, "waypoints Ready on "+version, func() (bool, error) {
			for ns := range original {
				if tags, notReady := e.proxies(ns); len(tags) != 1 || notReady > 0 || tags[firstKey(tags)] != version {
					return false, fmt.Errorf("%s: %v, %d not Ready", ns, tags, notReady)
				}
			}
			return true, nil
		})
	}
	waypointsOn("1.27.3")
	history := wp.watchGateways()
	if _, err := e.mc.Create(e.ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "wp-kill"},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Waypoints: v1alpha1.WaypointsOnly, RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5},
			Waves: []v1alpha1.Wave{{Name: "first", Percent: ptr(int32(50))}, {Name: "all", Percent: ptr(int32(100))}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// After every death: each Gateway on its original label or on 1-28, and
	// one on 1-28 only with that original recorded beforehand.
	check := func(deaths int) {
		st := e.migration("wp-kill").Status
		for ns, orig := range original {
			live := wp.gatewayRev(ns, "waypoint")
			if live != orig && live != "1-28" {
				t.Fatalf("after death %d: Gateway %s/waypoint labelled %q, want %q or 1-28", deaths, ns, live, orig)
			}
			if live == orig {
				continue
			}
			i := slices.IndexFunc(st.Namespaces, func(n v1alpha1.NamespaceStatus) bool { return n.Name == ns })
			if i < 0 {
				t.Fatalf("after death %d: Gateway %s/waypoint on 1-28 while status has no entry for %s", deaths, ns, ns)
			}
			if rec, ok := st.Namespaces[i].Waypoints["waypoint"]; !ok || rec != orig || st.Namespaces[i].Phase == v1alpha1.NamespacePending {
				t.Fatalf("after death %d: Gateway %s/waypoint on 1-28 while status records %+v", deaths, ns, st.Namespaces[i])
			}
		}
	}
	phase := func(p v1alpha1.MigrationPhase) func() bool {
		return func() bool { return e.migration("wp-kill").Status.Phase == p }
	}
	deaths := e.controllerUntil(2*time.Minute, phase(v1alpha1.MigrationSucceeded), check)
	t.Logf("FIGURE: the waypoint waves took %d controller processes, each killed after one persisted step", deaths)
	waypointsOn("1.28.1")
	for ns, orig := range original {
		if got, want := history.of(ns+"/waypoint"), []string{orig, "1-28"}; !slices.Equal(got, want) {
			t.Errorf("Gateway %s/waypoint went %q, want moved once: %q", ns, got, want)
		}
	}
	if deaths < 2*3 {
		t.Errorf("%d controller deaths, want at least three persisted steps a wave (Retagging, the Gateway, Retagged)", deaths)
	}

	e.abort("wp-kill", v1alpha1.AbortAll)
	deaths = e.controllerUntil(2*time.Minute, phase(v1alpha1.MigrationAborted), check)
	t.Logf("FIGURE: the abort took %d controller processes", deaths)
	for ns, orig := range original {
		if got := wp.gatewayRev(ns, "waypoint"); got != orig {
			t.Errorf("after the abort Gateway %s/waypoint is labelled %q, want its original %q", ns, got, orig)
		}
		if got, want := history.of(ns+"/waypoint"), []string{orig, "1-28", orig}; !slices.Equal(got, want) {
			t.Errorf("Gateway %s/waypoint went %q, want moved once each way: %q", ns, got, want)
		}
	}
	waypointsOn("1.27.3")
}
