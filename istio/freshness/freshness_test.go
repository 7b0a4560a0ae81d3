package freshness

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

const day = 24 * time.Hour

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// fleet builds objects the way the API server would hold them: istiod
// revisions, tag webhooks, namespaces, workloads with their revisions (the
// creation times of which are the restart history), and their pods.
type fleet struct{ o Objects }

func (f *fleet) istiod(rev, version string, tags ...string) {
	f.o.Deployments = append(f.o.Deployments, appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: istio.DefaultNamespace, Name: "istiod-" + rev, Labels: map[string]string{"app": "istiod", istio.LabelRev: rev}},
		Spec:       appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "istio/pilot:" + version}}}}},
		Status:     appsv1.DeploymentStatus{ReadyReplicas: 1},
	})
	for _, tag := range tags {
		f.o.Webhooks = append(f.o.Webhooks, admv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-revision-tag-" + tag, Labels: map[string]string{istio.LabelTag: tag, istio.LabelRev: rev}}})
	}
}

func (f *fleet) namespace(name string, labels map[string]string) {
	f.o.Namespaces = append(f.o.Namespaces, corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
}

func controller(kind, name string) []metav1.OwnerReference {
	t := true
	return []metav1.OwnerReference{{Kind: kind, Name: name, Controller: &t, UID: types.UID(kind + name)}}
}

// deployment adds a Deployment restarted at each of restarts (ago, oldest
// first) whose pods, created at the last restart, run proxy version.
func (f *fleet) deployment(ns, name string, labels map[string]string, pods int, version string, restarts ...time.Duration) {
	f.o.Deployments = append(f.o.Deployments, appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}})
	var rs string
	for i, ago := range restarts {
		rs = fmt.Sprintf("%s-%d", name, i)
		f.o.ReplicaSets = append(f.o.ReplicaSets, appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rs,
			CreationTimestamp: metav1.NewTime(now.Add(-ago)), OwnerReferences: controller("Deployment", name)}})
	}
	f.pods(ns, name, "ReplicaSet", rs, pods, version, restarts[len(restarts)-1])
}

func (f *fleet) statefulSet(ns, name string, pods int, version string, restarts ...time.Duration) {
	f.o.StatefulSets = append(f.o.StatefulSets, appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	for i, ago := range restarts {
		f.o.ControllerRevisions = append(f.o.ControllerRevisions, appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", name, i),
			CreationTimestamp: metav1.NewTime(now.Add(-ago)), OwnerReferences: controller("StatefulSet", name)}})
	}
	f.pods(ns, name, "StatefulSet", name, pods, version, restarts[len(restarts)-1])
}

func (f *fleet) pods(ns, workload, ownerKind, owner string, n int, version string, ago time.Duration) {
	for i := range n {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", workload, i), CreationTimestamp: metav1.NewTime(now.Add(-ago)),
			OwnerReferences: controller(ownerKind, owner)}}
		p.Spec.NodeName = "n1"
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app:1"}, {Name: istio.ProxyContainer, Image: "istio/proxyv2:" + version}}
		f.o.Pods = append(f.o.Pods, p)
	}
}

func (f *fleet) build(t *testing.T, target Target) Report {
	t.Helper()
	r, err := Build(inventory.Options{}, f.o, target, Keys{}, now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func workload(t *testing.T, r Report, ref string) Workload {
	t.Helper()
	for _, w := range r.Workloads {
		if w.Ref() == ref {
			return w
		}
	}
	t.Fatalf("no workload %s in %+v", ref, r.Workloads)
	return Workload{}
}

// twoTeams is the cluster the tests read: 1.28.1 designated (the default
// tag), 1.27.3 still installed; team payments restarts weekly (one
// workload with jitter), team search is pinned to the old revision, and one
// workload of payments' namespace, owned by team checkout, never restarts.
func twoTeams() *fleet {
	f := &fleet{}
	f.istiod("1-28", "1.28.1", "default")
	f.istiod("1-27", "1.27.3", "old")
	f.namespace("shop", map[string]string{istio.LabelRev: "default", "team": "payments", "owner": "ana"})
	f.namespace("search", map[string]string{istio.LabelRev: "1-27", "team": "search"})
	// Exactly weekly, last restarted a day ago: next in six days.
	f.deployment("shop", "cart", nil, 3, "1.27.3", 15*day, 8*day, 1*day)
	// Weekly with jitter (gaps 6d, 8d, 7d): median 7d, spread 1d; last
	// restarted 3 days ago, so next in 4 days (true cadence 7d).
	f.deployment("shop", "pay", nil, 2, "1.27.3", 24*day, 18*day, 10*day, 3*day)
	// Never restarted since it was created 61 days ago.
	f.deployment("shop", "legacy", map[string]string{"team": "checkout"}, 1, "1.26.2", 61*day)
	// Fresh already.
	f.deployment("shop", "web", nil, 2, "1.28.1", 9*day, 2*day)
	// Restarts daily, but its namespace is on the old revision.
	f.statefulSet("search", "index", 2, "1.27.3", 3*day, 2*day, 1*day)
	return f
}

func TestExposureWindowFromKnownCadences(t *testing.T) {
	r := twoTeams().build(t, Target{MaxMinorsBehind: 1, MaxAge: 30 * day})
	if r.Version != "1.28.1" {
		t.Fatalf("designated version %s, want the default tag's 1.28.1", r.Version)
	}
	for _, tc := range []struct {
		ref                 string
		cadence, spread, in time.Duration
		never               bool
	}{
		{ref: "Deployment shop/cart", cadence: 7 * day, in: 6 * day},
		{ref: "Deployment shop/pay", cadence: 7 * day, spread: day, in: 4 * day},
		{ref: "Deployment shop/legacy", never: true},
		{ref: "StatefulSet search/index", cadence: day, never: true},
	} {
		w := workload(t, r, tc.ref)
		if w.Cadence.Duration != tc.cadence || w.Spread.Duration != tc.spread {
			t.Errorf("%s: cadence %s ± %s, want %s ± %s", tc.ref, w.Cadence.Duration, w.Spread.Duration, tc.cadence, tc.spread)
		}
		if tc.never != (w.NextRestart == nil) {
			t.Errorf("%s: next restart %v, want never=%v", tc.ref, w.NextRestart, tc.never)
			continue
		}
		if !tc.never {
			if got := w.NextRestart.Sub(now); got != tc.in {
				t.Errorf("%s: next restart in %s, want %s", tc.ref, got, tc.in)
			}
		}
	}
	if w := workload(t, r, "StatefulSet search/index"); !strings.Contains(w.Pinned, "revision 1-27 (1.27.3)") {
		t.Errorf("index: pinned %q, want the old revision named", w.Pinned)
	}
	teams := map[string]Group{}
	for _, g := range r.Teams {
		teams[g.Name] = g
	}
	if g := teams["payments"]; g.Stale != 5 || g.Pods != 7 || g.Exposure.Window.Duration != 6*day || g.Exposure.Never != 0 {
		t.Errorf("payments: %+v, want 5 of 7 stale, window 6d, none never", g)
	}
	if g := teams["checkout"]; g.Lagging != 1 || g.MinorsBehind != 2 || g.OverAge != 1 || g.Exposure.Never != 1 {
		t.Errorf("checkout: %+v, want 1 lagging 2 minors behind, over age, never restarting", g)
	}
	if g := teams["search"]; g.Stale != 2 || g.Lagging != 0 || g.Exposure.Never != 1 {
		t.Errorf("search: %+v, want 2 stale within the skew target, pinned", g)
	}
	if tail := r.LongTail(2); len(tail) != 2 || tail[0].NextRestart != nil || tail[1].NextRestart != nil {
		t.Errorf("long tail %v, want the two that never restart by themselves first", tail)
	}
	want := "checkout: 1 of 1 pods behind 1.28.1 (up to 2 minors); the oldest pod is 61d old; 1 over the 30d maximum age; 1 workload never on 1.28.1 without a forced restart or migration"
	if got := r.Line(teams["checkout"]); got != want {
		t.Errorf("line:\n got %s\nwant %s", got, want)
	}
	if got := r.Summary(); got != "freshness: 3 of 3 teams behind 1.28.1 (8 of 10 sidecar pods); exposure window 6d, 2 workloads never on 1.28.1 without a forced restart or migration" {
		t.Errorf("summary: %s", got)
	}
}

// A periodic workload observed at any point of its cycle is expected at its
// next period, within the stated spread of the truth.
func TestNextRestartWithinStatedError(t *testing.T) {
	for _, jitter := range []time.Duration{0, 6 * time.Hour, day} {
		for _, since := range []time.Duration{time.Hour, 3 * day, 13 * day} {
			f := &fleet{}
			f.istiod("1-28", "1.28.1", "default")
			f.namespace("a", nil)
			// True cadence 7d; gaps alternate 7d±jitter.
			var restarts []time.Duration
			at := since
			for i := range 6 {
				restarts = append([]time.Duration{at}, restarts...)
				at += 7*day + time.Duration(1-2*(i%2))*jitter
			}
			f.deployment("a", "w", nil, 1, "1.27.3", restarts...)
			w := workload(t, f.build(t, Target{}), "Deployment a/w")
			truth := 7*day - since%(7*day)
			got := w.NextRestart.Sub(now)
			if diff := (got - truth).Abs(); diff > w.Spread.Duration {
				t.Errorf("jitter %s, %s since the last restart: next in %s, truth %s, stated error %s", jitter, since, got, truth, w.Spread.Duration)
			}
		}
	}
}

func TestDesignatedVersion(t *testing.T) {
	f := &fleet{}
	f.istiod("1-28", "1.28.1")
	f.istiod("1-29", "1.29.0")
	inv, err := inventory.Build(inventory.Options{}, f.o.Objects)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := Designated(inv, Target{}); err != nil || v.String() != "1.29.0" {
		t.Errorf("no default tag: %v %v, want the newest ready revision 1.29.0", v, err)
	}
	if v, _ := Designated(inv, Target{Version: skew.MustParse("1.28.2")}); v.String() != "1.28.2" {
		t.Errorf("named target: %v", v)
	}
	if _, err := Designated(inventory.Inventory{}, Target{}); err == nil || !strings.Contains(err.Error(), "--to") {
		t.Errorf("no revision: %v, want an error saying to name one", err)
	}
}

// TestCollectorPublishesPerTeamAndNamespace: the metrics carry team and
// namespace (never a pod or workload), and the window per team.
func TestCollectorPublishesPerTeamAndNamespace(t *testing.T) {
	f := twoTeams()
	o := f.o
	var objs []runtime.Object
	objs = objects(objs, o.Namespaces)
	objs = objects(objs, o.Pods)
	objs = objects(objs, o.Deployments)
	objs = objects(objs, o.ReplicaSets)
	objs = objects(objs, o.StatefulSets)
	objs = objects(objs, o.ControllerRevisions)
	objs = objects(objs, o.Webhooks)
	reg := prometheus.NewRegistry()
	c, err := NewCollector(CollectorConfig{Client: fake.NewClientset(objs...), Registry: reg, Target: Target{MaxMinorsBehind: 1}})
	if err != nil {
		t.Fatal(err)
	}
	c.Refresh(context.Background())
	want := `
# HELP nodewise_freshness_stale_pods Sidecar pods whose proxy is older than the designated version.
# TYPE nodewise_freshness_stale_pods gauge
nodewise_freshness_stale_pods{namespace="search",team="search"} 2
nodewise_freshness_stale_pods{namespace="shop",team="checkout"} 1
nodewise_freshness_stale_pods{namespace="shop",team="payments"} 5
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "nodewise_freshness_stale_pods"); err != nil {
		t.Error(err)
	}
	never := `
# HELP nodewise_freshness_never_workloads Stale workloads no restart of their own is expected to fix (no restart history, or pinned to an older revision), by team (team="" is the fleet).
# TYPE nodewise_freshness_never_workloads gauge
nodewise_freshness_never_workloads{team=""} 2
nodewise_freshness_never_workloads{team="checkout"} 1
nodewise_freshness_never_workloads{team="payments"} 0
nodewise_freshness_never_workloads{team="search"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(never), "nodewise_freshness_never_workloads"); err != nil {
		t.Error(err)
	}
}

func objects[T any, P interface {
	*T
	runtime.Object
}](to []runtime.Object, items []T) []runtime.Object {
	for i := range items {
		to = append(to, P(&items[i]))
	}
	return to
}

// waypoint adds the pods of a waypoint's Deployment as istiod creates them:
// their own istio-proxy on the Gateway's revision.
func (f *fleet) waypoint(ns, gateway, rev, version string, pods int) {
	for i := range pods {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", gateway, i), CreationTimestamp: metav1.NewTime(now.Add(-day)),
			OwnerReferences: controller("ReplicaSet", gateway+"-rs"),
			Labels:          map[string]string{istio.LabelGatewayManaged: istio.GatewayManagedWaypoint, istio.LabelK8sGatewayName: gateway},
			Annotations:     map[string]string{istio.LabelRev: rev}}}
		p.Spec.NodeName = "n1"
		p.Spec.Containers = []corev1.Container{{Name: istio.ProxyContainer, Image: "istio/proxyv2:" + version}}
		f.o.Pods = append(f.o.Pods, p)
	}
}

// TestWaypointsAgainstTheTarget: each waypoint counts once against the
// designated version (never as a sidecar workload), the stale ones are
// named in the report and the summary, and the metrics count them per
// namespace.
func TestWaypointsAgainstTheTarget(t *testing.T) {
	f := twoTeams()
	f.namespace("mesh", map[string]string{istio.LabelDataplaneMode: istio.DataplaneModeAmbient})
	f.waypoint("mesh", "waypoint", "1-27", "1.27.3", 2)
	f.waypoint("mesh", "reviews", "1-28", "1.28.1", 1)
	r := f.build(t, Target{MaxMinorsBehind: 0})
	if w := r.Waypoints; w.Waypoints != 2 || w.Stale != 1 || w.Lagging != 1 || len(w.Behind) != 1 || w.Behind[0].Ref() != "mesh/waypoint" {
		t.Fatalf("waypoints %+v, want 2 with mesh/waypoint stale and lagging", w)
	}
	if r.Fleet.Pods != 10 {
		t.Errorf("fleet has %d sidecar pods, want 10: waypoint pods are not sidecar workloads", r.Fleet.Pods)
	}
	if s := r.Summary(); !strings.Contains(s, "; waypoints: 1 of 2 behind (mesh/waypoint 1.27.3)") {
		t.Errorf("summary %q does not name the stale waypoint", s)
	}

	var objs []runtime.Object
	objs = objects(objs, f.o.Namespaces)
	objs = objects(objs, f.o.Pods)
	objs = objects(objs, f.o.Deployments)
	objs = objects(objs, f.o.Webhooks)
	reg := prometheus.NewRegistry()
	c, err := NewCollector(CollectorConfig{Client: fake.NewClientset(objs...), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	c.Refresh(context.Background())
	want := `
# HELP nodewise_freshness_stale_waypoints Ambient waypoints whose oldest pod runs a proxy older than the designated version, by namespace.
# TYPE nodewise_freshness_stale_waypoints gauge
nodewise_freshness_stale_waypoints{namespace="mesh"} 1
# HELP nodewise_freshness_waypoints Ambient waypoints (Gateways of class istio-waypoint with a running pod) by namespace.
# TYPE nodewise_freshness_waypoints gauge
nodewise_freshness_waypoints{namespace="mesh"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "nodewise_freshness_waypoints", "nodewise_freshness_stale_waypoints"); err != nil {
		t.Error(err)
	}
}

// TestOptOutCountedUntilItExpires: a workload whose max-age opt-out lies
// ahead is counted as opted out, with its end; one whose opt-out has passed,
// or is not an RFC 3339 time, is not.
func TestOptOutCountedUntilItExpires(t *testing.T) {
	f := twoTeams()
	for i, v := range map[string]string{"cart": now.Add(day).Format(time.RFC3339), "pay": now.Add(-time.Hour).Format(time.RFC3339), "legacy": "next week"} {
		for j := range f.o.Deployments {
			if f.o.Deployments[j].Name == i {
				f.o.Deployments[j].Annotations = map[string]string{v1alpha1.AnnotationMaxAgeOptOutUntil: v}
			}
		}
	}
	r := f.build(t, Target{MaxMinorsBehind: 1, MaxAge: 30 * day})
	if w := workload(t, r, "Deployment shop/cart"); w.OptedOutUntil == nil || !w.OptedOutUntil.Equal(&metav1.Time{Time: now.Add(day)}) {
		t.Errorf("cart opted out until %v, want %s", w.OptedOutUntil, now.Add(day))
	}
	for _, ref := range []string{"Deployment shop/pay", "Deployment shop/legacy"} {
		if w := workload(t, r, ref); w.OptedOutUntil != nil {
			t.Errorf("%s opted out until %s: an expired or unreadable opt-out protects nothing", ref, w.OptedOutUntil)
		}
	}
	if r.Fleet.OptedOut != 1 {
		t.Errorf("fleet counts %d opted-out workloads, want 1", r.Fleet.OptedOut)
	}
	for _, g := range r.Teams {
		if want := map[string]int{"payments": 1}[g.Name]; g.OptedOut != want {
			t.Errorf("team %s counts %d opted out, want %d", g.Name, g.OptedOut, want)
		}
	}
	if line := r.Line(r.Fleet); !strings.Contains(line, "1 workload opted out") {
		t.Errorf("fleet line %q does not count the opt-out", line)
	}
}
