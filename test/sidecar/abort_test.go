package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/test/testkit"
)

func tierWaves(tiers ...string) []v1alpha1.Wave {
	var ws []v1alpha1.Wave
	for _, t := range tiers {
		ws = append(ws, v1alpha1.Wave{Name: "tier-" + t, NamespaceSelector: &v1alpha1.WaveSelector{MatchLabels: map[string]v1alpha1.LabelValue{v1alpha1.DefaultTierLabel: v1alpha1.LabelValue(t)}}})
	}
	return ws
}

// TestAbortMidWave aborts while the second wave's namespaces are restarting
// onto 1-28: every moved namespace is retagged back to 1-27 and restarted
// onto 1.27.3; the third wave's namespaces are never touched.
func TestAbortMidWave(t *testing.T) {
	e := start(t, 4, "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client
	for i := 0; i < 6; i++ {
		e.namespace(fmt.Sprintf("ab-%d", i), map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: fmt.Sprint(1 + i/2)}, app{name: "web", replicas: 4})
	}
	nss := []string{"ab-0", "ab-1", "ab-2", "ab-3", "ab-4", "ab-5"}
	e.allOn(3*time.Minute, "1.27.3", 4, nss...)
	untouched := podUIDs(t, ctx, cs, "ab-4")
	for k := range podUIDs(t, ctx, cs, "ab-5") {
		untouched[k] = true
	}
	e.controller(nil)
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "ab"},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Tag: "next", Waves: tierWaves("1", "2", "3"),
			RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 1}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Mid-wave: wave 2 (index 1) restarting, some of its pods already on 1.28.1.
	testkit.WaitFor(t, 5*time.Minute, "wave tier-2 half restarted", func() (bool, error) {
		rm := e.migration("ab")
		if rm.Status.CurrentWave != 1 {
			return false, fmt.Errorf("wave %d %s", rm.Status.CurrentWave, rm.Status.Reason)
		}
		tags, _ := e.proxies("ab-2")
		moved := 0
		for _, v := range tags {
			if v == "1.28.1" {
				moved++
			}
		}
		return moved > 0, fmt.Errorf("%d pods of ab-2 on 1.28.1", moved)
	})
	e.abort("ab", v1alpha1.AbortAll)
	rm := e.waitPhase("ab", 5*time.Minute, v1alpha1.MigrationAborted)
	t.Logf("aborted: %s", rm.Status.Reason)

	for _, ns := range nss[:4] {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels["istio.io/rev"] != "1-27" {
			t.Errorf("%s labelled %q after abort, want 1-27", ns, n.Labels["istio.io/rev"])
		}
	}
	e.allOn(time.Minute, "1.27.3", 4, nss...)
	for _, st := range rm.Status.Namespaces {
		switch st.Wave {
		case 0, 1:
			// Moved, then restarted back: two restarts, recorded.
			if st.Phase != v1alpha1.NamespaceRolledBack || st.Generation != 2 {
				t.Errorf("%s: phase %s generation %d, want RolledBack after 2 restarts", st.Name, st.Phase, st.Generation)
			}
		case 2:
			if st.Phase != v1alpha1.NamespacePending || st.Generation != 0 {
				t.Errorf("%s (not yet moved): phase %s generation %d", st.Name, st.Phase, st.Generation)
			}
		}
	}
	now := podUIDs(t, ctx, cs, "ab-4")
	for k := range podUIDs(t, ctx, cs, "ab-5") {
		now[k] = true
	}
	if len(now) != len(untouched) {
		t.Fatalf("wave 3 pods changed: %d before, %d after", len(untouched), len(now))
	}
	for uid := range now {
		if !untouched[uid] {
			t.Fatalf("wave 3 pod %s was recreated", uid)
		}
	}
	for _, ns := range []string{"ab-4", "ab-5"} {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := d.Spec.Template.Annotations[revisions.AnnotationRestartedAt]; ok {
			t.Errorf("%s/web was restarted", ns)
		}
	}
}

// TestGates: a wave is judged by the external gate only once its pods are
// Ready on the new version; Inconclusive holds the wave (fail closed), Fail
// halts the migration with the gate's reason, and the next wave never starts.
// The controller runs with deploy/'s RBAC only; a DaemonSet is restarted too;
// the halted migration is then aborted.
func TestGates(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx := e.ctx
	// g-1 also runs a DaemonSet (3 nodes): restarted through the split-out RBAC role.
	e.namespace("g-1", map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: "1"}, app{name: "web", replicas: 2}, app{name: "agent", ds: true})
	e.namespace("g-2", map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: "2"}, app{name: "web", replicas: 2})
	// An ambient namespace whose istio.io/rev picks its waypoint revision has no sidecars to move.
	e.namespace("g-amb", map[string]string{"istio.io/rev": "1-27", "istio.io/dataplane-mode": "ambient", v1alpha1.DefaultTierLabel: "1"})
	e.allOn(2*time.Minute, "1.27.3", 5, "g-1")
	e.allOn(2*time.Minute, "1.27.3", 2, "g-2")

	var mu sync.Mutex
	outcome := health.Inconclusive
	var judged []string
	gate := revisions.GateFunc(func(_ context.Context, in revisions.WaveInput) (health.Verdict, error) {
		// The gate sees the wave only when its pods are on the new proxy.
		tags, notReady := e.proxies(in.Namespaces[0])
		for _, v := range tags {
			if v != "1.28.1" || notReady > 0 {
				return health.Verdict{}, fmt.Errorf("gate called before %s was Ready on 1.28.1", in.Namespaces[0])
			}
		}
		mu.Lock()
		defer mu.Unlock()
		judged = append(judged, in.Wave)
		return health.Verdict{Outcome: outcome, Reasons: []string{"caller success rate 97.1% < 99.5% (test)"}}, nil
	})
	// Run as the revision controller's own ServiceAccount with only
	// deploy/sidecar's RBAC, to prove the shipped roles suffice without the
	// NodeRollout orchestrator's.
	sa := e.asRevisionsServiceAccount()
	e.controllerAs(gate, sa)
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "g"},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Waves: tierWaves("1", "2"),
			RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rm := e.waitPhase("g", 2*time.Minute, v1alpha1.MigrationGating)
	if len(rm.Status.Namespaces) != 2 || rm.Status.Namespaces[0].Name != "g-1" || rm.Status.Namespaces[1].Name != "g-2" {
		t.Fatalf("migration scope %+v, want g-1 and g-2 (not the ambient namespace)", rm.Status.Namespaces)
	}
	if !strings.Contains(rm.Status.Reason, "held by its gate") {
		t.Fatalf("gating reason %q", rm.Status.Reason)
	}
	time.Sleep(2 * time.Second) // several reconciles: an Inconclusive gate must not let wave 2 start
	if rm = e.migration("g"); rm.Status.CurrentWave != 0 || rm.Status.Namespaces[1].Phase != v1alpha1.NamespacePending {
		t.Fatalf("wave 2 started under an inconclusive gate: %+v", rm.Status)
	}
	mu.Lock()
	outcome = health.Fail
	mu.Unlock()
	rm = e.waitPhase("g", time.Minute, v1alpha1.MigrationHalted)
	if !strings.Contains(rm.Status.Reason, "caller success rate") {
		t.Fatalf("halt reason %q does not carry the gate's reason", rm.Status.Reason)
	}
	if tags, _ := e.proxies("g-2"); tags[firstKey(tags)] != "1.27.3" {
		t.Fatalf("g-2 moved after a failed gate: %v", tags)
	}
	mu.Lock()
	if len(judged) < 2 || judged[0] != "tier-1" {
		t.Fatalf("gate calls %v", judged)
	}
	mu.Unlock()
	d, err := e.c.Client.AppsV1().DaemonSets("g-1").Get(ctx, "agent", metav1.GetOptions{})
	if err != nil || d.Spec.Template.Annotations[revisions.AnnotationRestartedAt] != rm.Status.Namespaces[0].RestartedAt {
		t.Fatalf("DaemonSet g-1/agent not restarted with the recorded stamp: %v", err)
	}

	// A halted migration can still be aborted: g-1 goes back to 1-27.
	e.abort("g", v1alpha1.AbortAll)
	rm = e.waitPhase("g", 2*time.Minute, v1alpha1.MigrationAborted)
	e.allOn(time.Minute, "1.27.3", 5, "g-1")
	e.allOn(time.Minute, "1.27.3", 2, "g-2")
	if rm.Status.Namespaces[0].Generation != 2 || rm.Status.Namespaces[1].Generation != 0 {
		t.Fatalf("after abort: %+v", rm.Status.Namespaces)
	}
}

func firstKey(m map[string]string) string {
	for k := range m {
		return k
	}
	return ""
}

// TestAbortWave: with abort: wave only the current wave goes back. Wave
// tier-1 passed and stays on 1.28.1 under the tag; wave tier-2, held by its
// gate, goes back to 1-27; tier-3 is never touched. While the wave is held
// the controller reads only its informers: it makes no request at all.
func TestAbortWave(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client
	for i, ns := range []string{"aw-1", "aw-2", "aw-3"} {
		e.namespace(ns, map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: fmt.Sprint(i + 1)}, app{name: "web", replicas: 2})
	}
	e.allOn(2*time.Minute, "1.27.3", 2, "aw-1", "aw-2", "aw-3")
	untouched := podUIDs(t, ctx, cs, "aw-3")
	gate := revisions.GateFunc(func(_ context.Context, in revisions.WaveInput) (health.Verdict, error) {
		if in.Wave == "tier-1" {
			return health.Verdict{Outcome: health.Pass}, nil
		}
		return health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"not enough traffic (test)"}}, nil
	})
	var requests countingTransport
	cfg := rest.CopyConfig(e.c.Config)
	cfg.Wrap(requests.wrap)
	e.controllerAs(gate, cfg)
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "aw"},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Tag: "next", Waves: tierWaves("1", "2", "3"),
			RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Minute, "wave tier-2 held by its gate", func() (bool, error) {
		rm := e.migration("aw")
		return rm.Status.Phase == v1alpha1.MigrationGating && rm.Status.CurrentWave == 1, fmt.Errorf("phase %s wave %d: %s", rm.Status.Phase, rm.Status.CurrentWave, rm.Status.Reason)
	})
	e.allOn(time.Minute, "1.28.1", 2, "aw-1", "aw-2")
	before := requests.count()
	time.Sleep(3 * time.Second) // 15 re-examinations at 200 ms
	if n := requests.count() - before; n != 0 {
		t.Fatalf("the controller made %d API requests in 3 s while the wave was held (%v): it should read its informers", n, requests.last())
	}

	e.abort("aw", v1alpha1.AbortWave)
	rm := e.waitPhase("aw", 2*time.Minute, v1alpha1.MigrationAborted)
	t.Logf("aborted: %s", rm.Status.Reason)
	e.allOn(time.Minute, "1.28.1", 2, "aw-1")
	e.allOn(time.Minute, "1.27.3", 2, "aw-2", "aw-3")
	want := map[string]string{"aw-1": "next", "aw-2": "1-27", "aw-3": "1-27"}
	for ns, rev := range want {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels["istio.io/rev"] != rev {
			t.Errorf("%s labelled %q after abort: wave, want %q", ns, n.Labels["istio.io/rev"], rev)
		}
	}
	phases := map[string]v1alpha1.NamespacePhase{}
	for _, ns := range rm.Status.Namespaces {
		phases[ns.Name] = ns.Phase
	}
	if phases["aw-1"] != v1alpha1.NamespaceReady || phases["aw-2"] != v1alpha1.NamespaceRolledBack || phases["aw-3"] != v1alpha1.NamespacePending {
		t.Fatalf("namespace phases after abort: wave: %v", phases)
	}
	for uid := range podUIDs(t, ctx, cs, "aw-3") {
		if !untouched[uid] {
			t.Fatalf("wave tier-3 pod %s was recreated", uid)
		}
	}
}

// countingTransport counts the API requests a client makes, watches excepted
// (a watch is one long request that the informers keep open).
type countingTransport struct {
	mu      sync.Mutex
	n       int
	lastReq string
}

func (c *countingTransport) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Query().Get("watch") != "true" {
			c.mu.Lock()
			c.n++
			c.lastReq = r.Method + " " + r.URL.Path
			c.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (c *countingTransport) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *countingTransport) last() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastReq
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
