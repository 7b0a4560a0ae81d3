package sidecar

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/test/testkit"
)

// canaryWatch records, every 100 ms until stopped, each distinct canary
// state of the namespaces wp-1..3 (their canary label and weight, and the
// primary Gateway's istio.io/rev at that moment), as "canary@weight/rev".
type canaryWatch struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (w *waypointFake) watchCanaries() *canaryWatch {
	cw := &canaryWatch{seen: map[string][]string{}}
	stop, done := make(chan struct{}), make(chan struct{})
	w.e.t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			for i := 1; i <= 3; i++ {
				ns := fmt.Sprintf("wp-%d", i)
				n, err := w.e.c.Client.CoreV1().Namespaces().Get(w.e.ctx, ns, metav1.GetOptions{})
				if err != nil {
					continue
				}
				g, err := w.dyn.Resource(gatewaysGVR).Namespace(ns).Get(w.e.ctx, "waypoint", metav1.GetOptions{})
				if err != nil {
					continue
				}
				state := n.Labels[istio.LabelUseWaypointCanary] + "@" + n.Annotations[istio.AnnotationUseWaypointCanaryWeight] + "/" + g.GetLabels()[istio.LabelRev]
				cw.mu.Lock()
				if l := cw.seen[ns]; len(l) == 0 || l[len(l)-1] != state {
					cw.seen[ns] = append(l, state)
				}
				cw.mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return cw
}

// settled waits until the watcher has seen ns in state (it samples every
// 100 ms, so a migration can finish before its last sample).
func (cw *canaryWatch) settled(t *testing.T, ns, state string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, ns+" seen as "+state, func() (bool, error) {
		got := cw.states(ns)
		return len(got) > 0 && got[len(got)-1] == state, fmt.Errorf("seen %q", got)
	})
}

func (cw *canaryWatch) states(ns string) []string {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return append([]string(nil), cw.seen[ns]...)
}

// canaryGone fails the test unless ns's canary Gateway and its waypoint
// Deployment are gone and the namespace carries no canary key.
func (w *waypointFake) canaryGone(ns, canary string) {
	w.e.t.Helper()
	if _, err := w.dyn.Resource(gatewaysGVR).Namespace(ns).Get(w.e.ctx, canary, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		w.e.t.Errorf("canary Gateway %s/%s: %v, want it deleted", ns, canary, err)
	}
	testkit.WaitFor(w.e.t, time.Minute, "the canary waypoint Deployment of "+ns+" collected", func() (bool, error) {
		_, err := w.e.c.Client.AppsV1().Deployments(ns).Get(w.e.ctx, canary, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	n, err := w.e.c.Client.CoreV1().Namespaces().Get(w.e.ctx, ns, metav1.GetOptions{})
	if err != nil {
		w.e.t.Fatal(err)
	}
	for _, k := range []string{istio.LabelUseWaypointCanary, istio.LabelUseWaypointCanaryNamespace} {
		if v, ok := n.Labels[k]; ok {
			w.e.t.Errorf("namespace %s still labelled %s=%s", ns, k, v)
		}
	}
	if v, ok := n.Annotations[istio.AnnotationUseWaypointCanaryWeight]; ok {
		w.e.t.Errorf("namespace %s still annotated %s=%s", ns, istio.AnnotationUseWaypointCanaryWeight, v)
	}
}

// TestWaypointCanaryMovesAll: with istiod 1.32 and every ztunnel at 1.31 or
// later, a waypoints: Only migration moves each waypoint by weighted canary:
// a canary Gateway waypoint-1-32 beside it, the namespace pointed at the
// canary at 50% then 100% (each judged Pass by the agents) while the primary
// stays on 1-31, then the primary moved to 1-32 and the canary removed;
// every waypoint ends on 1.32.0, no canary Gateway, Deployment, label or
// annotation left.
func TestWaypointCanaryMovesAll(t *testing.T) {
	e, wp := waypointWavesFrom(t, "1.31.1", "1.32.0", true, []int32{50, 100})
	cw := wp.watchCanaries()
	rm := e.waitPhase("wp", 2*time.Minute, v1alpha1.MigrationSucceeded, v1alpha1.MigrationHalted)
	if rm.Status.Phase != v1alpha1.MigrationSucceeded {
		t.Fatalf("migration %s: %s", rm.Status.Phase, rm.Status.Reason)
	}
	if rm.Status.WaypointMethod != v1alpha1.WaypointCanary {
		t.Fatalf("waypointMethod %q, want Canary", rm.Status.WaypointMethod)
	}
	for i, w := range rm.Status.Waves {
		if !w.CanaryPromoted || w.CanaryWeight != 100 || w.Judgement == nil || w.Judgement.Outcome != "Pass" {
			t.Errorf("wave %d: weight %d, promoted %t, judgement %+v; want promoted after 100%% judged Pass", i, w.CanaryWeight, w.CanaryPromoted, w.Judgement)
		}
	}
	for i := 1; i <= 3; i++ {
		ns := fmt.Sprintf("wp-%d", i)
		orig := "1-31"
		if i == 2 {
			orig = "" // by the default tag
		}
		// The primary stays as it was while the weights step, then moves.
		want := []string{"@/" + orig, "waypoint-1-32@50/" + orig, "waypoint-1-32@100/" + orig, "waypoint-1-32@100/1-32", "@/1-32"}
		cw.settled(t, ns, "@/1-32")
		if got := cw.states(ns); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s went through %q, want %q", ns, got, want)
		}
		if got := wp.gatewayRev(ns, "waypoint"); got != "1-32" {
			t.Errorf("Gateway %s/waypoint labelled %q, want 1-32", ns, got)
		}
		wp.canaryGone(ns, "waypoint-1-32")
		tags, _ := e.proxies(ns)
		for p, v := range tags {
			if strings.HasPrefix(p, "waypoint-") && v != "1.32.0" {
				t.Errorf("waypoint pod %s/%s runs %q", ns, p, v)
			}
		}
	}
}

// TestWaypointCanaryHaltsOnFaultyBuild: a 1.32 whose waypoint resets 30% of
// the connections it carries halts at the first weight (10%) of the first
// wave on the agents' evidence, with only the canary's namespace pointed at
// the canary and every primary Gateway as created; an abort deletes the
// canary and takes the canary keys off the namespace, the primary never
// having left 1-31.
func TestWaypointCanaryHaltsOnFaultyBuild(t *testing.T) {
	e, wp := waypointWavesFrom(t, "1.31.1", "1.32.0-rst", false, nil)
	cw := wp.watchCanaries()
	rm := e.waitPhase("wp", 2*time.Minute, v1alpha1.MigrationHalted, v1alpha1.MigrationSucceeded)
	if rm.Status.Phase != v1alpha1.MigrationHalted || rm.Status.CurrentWave != 0 || rm.Status.Waves[0].CanaryWeight != 10 || !strings.Contains(rm.Status.Reason, "migrated pods") {
		t.Fatalf("migration %s at wave %d, weight %d (%s); want Halted at the first wave's 10%% on the migrated pods' evidence",
			rm.Status.Phase, rm.Status.CurrentWave, rm.Status.Waves[0].CanaryWeight, rm.Status.Reason)
	}
	t.Logf("halted: %s", rm.Status.Reason)
	cw.settled(t, "wp-1", "waypoint-1-32@10/1-31")
	if got := cw.states("wp-1"); strings.Join(got, " ") != "@/1-31 waypoint-1-32@10/1-31" {
		t.Errorf("wp-1 went through %q, want the canary at 10%% and the primary on 1-31", got)
	}
	for _, ns := range []string{"wp-2", "wp-3"} {
		if got := cw.states(ns); len(got) != 1 || !strings.HasPrefix(got[0], "@/") {
			t.Errorf("%s went through %q, want it never pointed at a canary", ns, got)
		}
		if _, err := wp.dyn.Resource(gatewaysGVR).Namespace(ns).Get(e.ctx, "waypoint-1-32", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s has a canary Gateway (%v) before its wave", ns, err)
		}
	}
	if a, b, c := wp.gatewayRev("wp-1", "waypoint"), wp.gatewayRev("wp-2", "waypoint"), wp.gatewayRev("wp-3", "waypoint"); a != "1-31" || b != "" || c != "1-31" {
		t.Fatalf("primary Gateway labels %q %q %q, want them as created", a, b, c)
	}
	if got := wp.gatewayRev("wp-1", "waypoint-1-32"); got != "1-32" {
		t.Fatalf("canary Gateway wp-1/waypoint-1-32 labelled %q, want 1-32", got)
	}

	e.abort("wp", v1alpha1.AbortAll)
	e.waitPhase("wp", time.Minute, v1alpha1.MigrationAborted)
	if got := wp.gatewayRev("wp-1", "waypoint"); got != "1-31" {
		t.Errorf("after the abort the primary Gateway is labelled %q, want 1-31", got)
	}
	wp.canaryGone("wp-1", "waypoint-1-32")
	cw.settled(t, "wp-1", "@/1-31")
	if got := cw.states("wp-1"); strings.Join(got, " ") != "@/1-31 waypoint-1-32@10/1-31 @/1-31" {
		t.Errorf("wp-1 went through %q, want the primary on 1-31 throughout", got)
	}
}

// TestWaypointCanaryKilledAtEveryStep: a canary migration of wp-1's
// waypoint (one wave, weights 50 and 100), run by controllers each killed after one persisted
// step (a status write, a Gateway created or deleted, a namespace or Gateway
// patched), ends as an unkilled one does. After every death each namespace
// has at most its primary and the one canary Gateway (nodewise's, owned by
// the primary), is pointed at a canary only while that canary exists and
// only at a recorded weight, and its primary leaves 1-31 only once the
// promotion is recorded.
func TestWaypointCanaryKilledAtEveryStep(t *testing.T) {
	e, wp := waypointNamespaces(t, "1.31.1", "1.32.0")
	ctx := e.ctx
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "wp"}, Spec: v1alpha1.RevisionMigrationSpec{
		From: "1-31", To: "1-32", Waypoints: v1alpha1.WaypointsOnly, WaypointCanaryWeights: []int32{50, 100}, RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5},
		Waves: []v1alpha1.Wave{{Name: "tier-1", NamespaceSelector: &v1alpha1.WaveSelector{MatchLabels: map[string]v1alpha1.LabelValue{v1alpha1.DefaultTierLabel: "1"}}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	check := func(deaths int) {
		rm := e.migration("wp")
		promoted := len(rm.Status.Waves) > 0 && rm.Status.Waves[0].CanaryPromoted
		for i := 1; i <= 3; i++ {
			ns := fmt.Sprintf("wp-%d", i)
			gws, err := wp.dyn.Resource(gatewaysGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var primaryUID, canaryOwner string
			canary := false
			for _, g := range gws.Items {
				switch g.GetName() {
				case "waypoint":
					primaryUID = string(g.GetUID())
					if rev := g.GetLabels()[istio.LabelRev]; rev == "1-32" && !promoted {
						t.Fatalf("after death %d: %s's primary on 1-32 before the promotion was recorded", deaths, ns)
					}
				case "waypoint-1-32":
					canary = true
					if len(g.GetOwnerReferences()) == 1 {
						canaryOwner = string(g.GetOwnerReferences()[0].UID)
					}
					if g.GetLabels()["app.kubernetes.io/managed-by"] != "nodewise-revisions" {
						t.Fatalf("after death %d: canary %s/%s not labelled as nodewise's: %v", deaths, ns, g.GetName(), g.GetLabels())
					}
				default:
					t.Fatalf("after death %d: unexpected Gateway %s/%s", deaths, ns, g.GetName())
				}
			}
			if canary && canaryOwner != primaryUID {
				t.Fatalf("after death %d: %s's canary owned by %q, want the primary %q", deaths, ns, canaryOwner, primaryUID)
			}
			n, err := e.c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if c := n.Labels[istio.LabelUseWaypointCanary]; c != "" {
				weight := n.Annotations[istio.AnnotationUseWaypointCanaryWeight]
				if c != "waypoint-1-32" || !canary || (weight != "50" && weight != "100") {
					t.Fatalf("after death %d: %s points at canary %q (exists: %t) at weight %q", deaths, ns, c, canary, weight)
				}
			}
		}
	}
	succeeded := func() bool { return e.migration("wp").Status.Phase == v1alpha1.MigrationSucceeded }
	deaths := e.controllerUntil(2*time.Minute, succeeded, check)
	t.Logf("FIGURE: the canary migration took %d controller processes, each killed after one persisted step", deaths)
	if got := wp.gatewayRev("wp-1", "waypoint"); got != "1-32" {
		t.Errorf("Gateway wp-1/waypoint labelled %q, want 1-32", got)
	}
	wp.canaryGone("wp-1", "waypoint-1-32")
}
