package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/freshness"
)

const day = 24 * time.Hour

// teamsCluster is a mesh of three teams as the API server holds it, at the
// dashboard's clock (t0+5m): 1.28.1 designated (the default tag), 1.27.3
// still installed. Team payments restarts cart weekly (last a day ago: next
// in 6 days); team checkout's legacy never restarted (61 days); team search
// is on the old revision (a restart keeps it there); team web is fresh.
func teamsCluster() *fake.Clientset {
	now := t0.Add(5 * time.Minute)
	var objs []runtime.Object
	add := func(o ...runtime.Object) { objs = append(objs, o...) }
	ctl := func(kind, name string) []metav1.OwnerReference {
		t := true
		return []metav1.OwnerReference{{Kind: kind, Name: name, Controller: &t, UID: types.UID(kind + name)}}
	}
	for _, r := range []struct{ rev, version, tag string }{{"1-28", "1.28.1", "default"}, {"1-27", "1.27.3", "old"}} {
		add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: istio.DefaultNamespace, Name: "istiod-" + r.rev, Labels: map[string]string{"app": "istiod", istio.LabelRev: r.rev}},
			Spec:   appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "istio/pilot:" + r.version}}}}},
			Status: appsv1.DeploymentStatus{ReadyReplicas: 1}},
			&admv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-revision-tag-" + r.tag, Labels: map[string]string{istio.LabelTag: r.tag, istio.LabelRev: r.rev}}})
	}
	add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{istio.LabelRev: "default", "team": "payments", "owner": "ana"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "search", Labels: map[string]string{istio.LabelRev: "1-27", "team": "search"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "front", Labels: map[string]string{istio.LabelRev: "default", "team": "web"}}})
	pods := func(ns, workload, ownerKind, owner string, n int, version string, ago time.Duration) {
		for i := range n {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", workload, i), CreationTimestamp: metav1.NewTime(now.Add(-ago)),
				OwnerReferences: ctl(ownerKind, owner)}}
			p.Spec.NodeName = "n1"
			p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app:1"}, {Name: istio.ProxyContainer, Image: "istio/proxyv2:" + version}}
			add(p)
		}
	}
	deployment := func(ns, name string, labels map[string]string, n int, version string, restarts ...time.Duration) {
		add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}})
		var rs string
		for i, ago := range restarts {
			rs = fmt.Sprintf("%s-%d", name, i)
			add(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rs, CreationTimestamp: metav1.NewTime(now.Add(-ago)), OwnerReferences: ctl("Deployment", name)}})
		}
		pods(ns, name, "ReplicaSet", rs, n, version, restarts[len(restarts)-1])
	}
	deployment("shop", "cart", nil, 3, "1.27.3", 15*day, 8*day, 1*day)
	deployment("shop", "legacy", map[string]string{"team": "checkout", "owner": "bo"}, 1, "1.26.2", 61*day)
	deployment("front", "web", nil, 2, "1.28.1", 9*day, 2*day)
	add(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "search", Name: "index"}})
	for i, ago := range []time.Duration{3 * day, 2 * day, day} {
		add(&appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "search", Name: fmt.Sprintf("index-%d", i),
			CreationTimestamp: metav1.NewTime(now.Add(-ago)), OwnerReferences: ctl("StatefulSet", "index")}})
	}
	pods("search", "index", "StatefulSet", "index", 2, "1.27.3", day)
	return fake.NewClientset(objs...)
}

// between is page from the first from to the next to.
func between(t *testing.T, page, from, to string) string {
	t.Helper()
	i := strings.Index(page, from)
	j := strings.Index(page[max(i, 0):], to)
	if i < 0 || j < 0 {
		t.Fatalf("the page has no %s … %s:\n%s", from, to, page)
	}
	return page[i : i+j]
}

func freshnessEnv(t *testing.T, client *fake.Clientset) *env {
	t.Helper()
	return newEnvWith(t, func(c *Config) {
		c.Freshness = &FreshnessConfig{Client: client, Target: freshness.Target{MaxMinorsBehind: 1}}
	})
}

// TestFreshnessPageShowsEachTeamsLine: /freshness (linked from the list)
// gives each team its lead's line and a table of its workloads behind,
// with when each restarts by itself or why never, the fleet's summary and
// the long tail; ?team= keeps one team.
func TestFreshnessPageShowsEachTeamsLine(t *testing.T) {
	e := freshnessEnv(t, teamsCluster())
	_, list := e.get("/")
	wantIn(t, list, `<a href="/freshness">Freshness</a>`)
	code, page := e.get("/freshness")
	if code != http.StatusOK {
		t.Fatalf("GET /freshness: %d\n%s", code, page)
	}
	wantIn(t, page,
		`<p class="summary" id="freshness-summary">freshness: 3 of 4 teams behind 1.28.1 (6 of 8 sidecar pods); exposure window 6d, 2 workloads never on 1.28.1 without a forced restart or migration</p>`,
		`<p class="team-line">payments: 3 of 3 pods behind 1.28.1 (up to 1 minor); the oldest pod is 24h old; exposure window 6d</p>`,
		`<p class="team-line">checkout: 1 of 1 pods behind 1.28.1 (up to 2 minors); the oldest pod is 61d old; 1 workload never on 1.28.1 without a forced restart or migration</p>`,
		`<p class="team-line">web: all 2 pods on 1.28.1; the oldest pod is 2d old</p>`,
		`<tr><td>shop</td><td>Deployment cart</td><td>ana</td><td>3 of 3</td><td>1.27.3</td><td>24h</td><td class="reason">in 6d (<time datetime="2026-12-09">2026-12-09</time>)</td></tr>`,
		`<td>Deployment legacy</td><td>bo</td><td>1 of 1</td><td>1.26.2</td><td>61d</td><td class="reason">never expected: no restart cadence (last restarted 61d ago)</td>`,
		`never: its namespace is on revision 1-27 (1.27.3): a restart keeps it there; migrate the namespace`,
		`<a href="/freshness?team=payments">payments</a>`, "Target: at most 1 minor release behind 1.28.1.")
	web := between(t, page, `data-team="web"`, "</section>")
	if !strings.Contains(web, "No workload behind.") || strings.Contains(web, "<table") {
		t.Errorf("the fresh team's section lists workloads:\n%s", web)
	}
	tail := between(t, page, `id="long-tail"`, "</table>")
	if strings.Index(tail, "Deployment legacy") < 0 || strings.Index(tail, "StatefulSet index") < 0 ||
		strings.Index(tail, "Deployment cart") < strings.Index(tail, "StatefulSet index") || strings.Contains(tail, "Deployment web") {
		t.Errorf("the long tail lists the never-restarting first, then cart, and no fresh workload:\n%s", tail)
	}

	code, page = e.get("/freshness?team=payments")
	if code != http.StatusOK {
		t.Fatalf("GET /freshness?team=payments: %d", code)
	}
	wantIn(t, page, `<p class="team-line">payments: 3 of 3 pods behind`, "freshness: 3 of 4 teams behind", `<a href="/freshness">Every team</a>`)
	for _, other := range []string{`data-team="checkout"`, `data-team="search"`, "Deployment legacy", "StatefulSet index"} {
		if strings.Contains(page, other) {
			t.Errorf("the page of team payments shows %s", other)
		}
	}
	code, page = e.get("/freshness?team=nobody")
	if code != http.StatusNotFound {
		t.Errorf("GET /freshness?team=nobody: %d, want 404", code)
	}
	wantIn(t, page, "No team nobody runs sidecar pods.", `<a href="/freshness?team=search">search</a>`)
}

// TestFreshnessPageSaysWhenForbidden: credentials that may not list pods get
// a page that says so and what the page lists, not a server error.
func TestFreshnessPageSaysWhenForbidden(t *testing.T) {
	client := teamsCluster()
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New(`User "viewer" cannot list resource "pods" in API group "" at the cluster scope`))
	})
	e := freshnessEnv(t, client)
	code, page := e.get("/freshness")
	if code != http.StatusForbidden {
		t.Errorf("GET /freshness: %d, want 403", code)
	}
	wantIn(t, page, `id="freshness-error">Forbidden: the dashboard&#39;s credentials may not read what freshness needs (listing pods: pods is forbidden: User &#34;viewer&#34; cannot list resource &#34;pods&#34;`,
		"It lists pods, namespaces, deployments, replicasets, statefulsets, controllerrevisions and mutatingwebhookconfigurations in every namespace.")
	if strings.Contains(page, "freshness-summary") {
		t.Error("a page that could not read the cluster shows a summary")
	}
}

// TestFreshnessPageSaysWhatThePlatformWillRestart: a team lead reads, after
// the team's line, what the platform's policies will restart of it and
// when; a team they leave alone gets nothing more, and a policy that
// cannot be read says so on every team instead of hiding it.
func TestFreshnessPageSaysWhatThePlatformWillRestart(t *testing.T) {
	var asked []string
	fail := false
	e := newEnvWith(t, func(c *Config) {
		c.Freshness = &FreshnessConfig{Client: teamsCluster(), Target: freshness.Target{MaxMinorsBehind: 1},
			Restarts: func(_ context.Context, teams []string, _ time.Time) (map[string]string, error) {
				asked = teams
				if fail {
					return nil, errors.New("podagepolicies is forbidden")
				}
				return map[string]string{"checkout": "the platform will restart 1 workload from 2026-12-09 22:00 UTC (PodAgePolicy age)"}, nil
			}}
	})
	_, page := e.get("/freshness")
	wantIn(t, page, `<p class="team-line">checkout: 1 of 1 pods behind 1.28.1 (up to 2 minors); the oldest pod is 61d old; 1 workload never on 1.28.1 without a forced restart or migration; the platform will restart 1 workload from 2026-12-09 22:00 UTC (PodAgePolicy age)</p>`,
		`<p class="team-line">web: all 2 pods on 1.28.1; the oldest pod is 2d old</p>`)
	if len(asked) != 4 {
		t.Errorf("asked for teams %v, want the 4 on the page", asked)
	}
	fail = true
	_, page = e.get("/freshness?team=web")
	wantIn(t, page, `<p class="team-line">web: all 2 pods on 1.28.1; the oldest pod is 2d old; what the platform will restart cannot be read: podagepolicies is forbidden</p>`)
}
