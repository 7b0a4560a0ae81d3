package sidecar

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/deploy/argocd"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/revisions/revtag"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestStableTagHandover: the canary tag's life after a migration, and Argo
// CD's view of the namespaces it moves. Namespaces on tag stable (-> 1-27)
// and one adopted from istio-injection=enabled move to 1-28 through canary;
// once Succeeded, the handover is held while an unmoved namespace still
// uses stable (which keeps 1-27), then, that namespace relabelled, stable
// points at 1-28, the namespace that was on stable has its labels of Git
// again (nothing for Argo CD to diff), the adopted one is on stable, no pod
// restarted, and canary points at 1-28 with no namespace on it. In between,
// deploy/argocd's Namespace ignoreDifferences select exactly the labels that
// differ from the namespaces as created, and nodewise's field manager owns
// exactly the one it set. An abort after the handover changes nothing and
// says how to go back. The controller runs as deploy/sidecar's
// ServiceAccount.
func TestStableTagHandover(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client
	if err := revtag.Set(ctx, cs, revtag.SetOptions{Tag: "stable", Revision: "1-27"}); err != nil {
		t.Fatal(err)
	}
	git := map[string]map[string]string{ // the namespaces' labels as Git declares them
		"s-tagged":  {"istio.io/rev": "stable", "team": "a", "move": "yes"},
		"s-adopted": {"istio-injection": "enabled", "team": "b", "move": "yes"},
		"s-other":   {"istio.io/rev": "stable"},
	}
	for ns, l := range git {
		e.namespace(ns, l, app{name: "web", replicas: 1})
	}
	e.allOn(2*time.Minute, "1.27.3", 1, "s-tagged", "s-adopted", "s-other")

	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "hand"}, Spec: v1alpha1.RevisionMigrationSpec{
		From: "1-27", To: "1-28", StableTag: "stable", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5},
		Waves: []v1alpha1.Wave{{Name: "all", NamespaceSelector: &v1alpha1.WaveSelector{MatchLabels: map[string]v1alpha1.LabelValue{"move": "yes"}}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// As deploy/sidecar's ServiceAccount, under its RBAC and admission
	// policy: the handover needs no verb a migration does not have.
	e.controllerAs(revisions.GateFunc(func(context.Context, revisions.WaveInput) (health.Verdict, error) {
		return health.Verdict{Outcome: health.Pass}, nil
	}), e.asRevisionsServiceAccount())
	e.waitPhase("hand", time.Minute, v1alpha1.MigrationSucceeded)
	held := e.waitCondition("hand", revisions.ConditionTagHandedOver, metav1.ConditionFalse)
	if !strings.Contains(held.Message, "s-other") {
		t.Errorf("handover held with %q, want it to name s-other", held.Message)
	}
	if r := e.migration("hand").Status.Reason; !strings.Contains(r, "handover held: tag stable (-> 1-27)") {
		t.Errorf("reason %q does not say the handover is held (what Argo CD and kstatus show)", r)
	}
	if rev, _ := revtag.Get(ctx, cs, "stable"); rev != "1-27" {
		t.Errorf("tag stable points at %s while s-other still uses it, want 1-27", rev)
	}
	e.allOn(time.Minute, "1.28.1", 1, "s-tagged", "s-adopted")

	// Argo CD's view, mid-life: the shipped ignoreDifferences select every
	// label nodewise changed and nothing else, on the namespaces as served.
	ign, err := argocd.NamespaceIgnoreDifferences()
	if err != nil {
		t.Fatal(err)
	}
	if len(ign.ManagedFieldsManagers) != 1 || ign.ManagedFieldsManagers[0] != revisions.FieldManager {
		t.Errorf("managedFieldsManagers %v, want [%s]", ign.ManagedFieldsManagers, revisions.FieldManager)
	}
	for _, name := range []string{"s-tagged", "s-adopted"} {
		live, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{"istio.io/rev": true} // set to canary on both
		if _, ok := git[name]["istio-injection"]; ok {
			want["istio-injection"] = true // removed
		}
		if got := differingLabels(git[name], live.Labels); !equalSet(got, want) {
			t.Fatalf("%s: labels %v differ from Git's %v at %v, want %v", name, live.Labels, git[name], got, want)
		}
		selected := map[string]bool{}
		for _, p := range ign.JSONPointers {
			for _, obj := range []map[string]any{asJSON(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: git[name]}}), asJSON(t, live)} {
				if l, ok := labelAt(obj, p); ok {
					selected[l] = true
				}
			}
		}
		if !equalSet(selected, want) {
			t.Errorf("%s: the jsonPointers %v select labels %v in Git's and the live namespace, want exactly those that differ, %v", name, ign.JSONPointers, keys(selected), keys(want))
		}
		owned := map[string]bool{}
		for _, mf := range live.ManagedFields {
			if mf.Manager == revisions.FieldManager && mf.FieldsV1 != nil {
				var f struct {
					Meta struct {
						Labels map[string]any `json:"f:labels"`
					} `json:"f:metadata"`
				}
				if err := json.Unmarshal(mf.FieldsV1.Raw, &f); err != nil {
					t.Fatal(err)
				}
				for k := range f.Meta.Labels {
					owned[strings.TrimPrefix(k, "f:")] = true
				}
			}
		}
		if !equalSet(owned, map[string]bool{"istio.io/rev": true}) {
			t.Errorf("%s: %s owns labels %v, want [istio.io/rev] (a removed label has no owner: the jsonPointers cover it)", name, revisions.FieldManager, keys(owned))
		}
	}

	uids := map[string]types.UID{}
	for _, ns := range []string{"s-tagged", "s-adopted"} {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			uids[ns+"/"+p.Name] = p.UID
		}
	}
	// s-other goes back to naming its revision: stable is free to move.
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, "s-other", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/rev":"1-27"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	done := e.waitCondition("hand", revisions.ConditionTagHandedOver, metav1.ConditionTrue)
	t.Logf("handed over: %s", done.Message)
	if r := e.migration("hand").Status.Reason; r != "all 2 namespaces on 1-28; handed over to tag stable" {
		t.Errorf("reason %q after the handover", r)
	}
	for tag, want := range map[string]string{"stable": "1-28", "canary": "1-28"} {
		if rev, err := revtag.Get(ctx, cs, tag); rev != want {
			t.Errorf("tag %s points at %q (%v), want %s", tag, rev, err, want)
		}
	}
	wh, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, revtag.WebhookName("stable"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var managers []string
	for _, mf := range wh.ManagedFields {
		managers = append(managers, mf.Manager)
	}
	if !strings.Contains(strings.Join(managers, ","), revisions.FieldManager) {
		t.Errorf("the moved tag webhook's managers are %v, want %s among them", managers, revisions.FieldManager)
	}
	for name, want := range map[string]map[string]string{
		"s-tagged":  git["s-tagged"], // Git's labels again: nothing left to ignore
		"s-adopted": {"istio.io/rev": "stable", "team": "b", "move": "yes"},
	} {
		live, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d := differingLabels(want, live.Labels); len(d) > 0 {
			t.Errorf("%s after the handover: labels %v, want %v", name, live.Labels, want)
		}
	}
	if nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: "istio.io/rev=canary"}); err != nil || len(nss.Items) > 0 {
		t.Errorf("namespaces still on canary after the handover: %d (%v)", len(nss.Items), err)
	}
	for ns := range map[string]bool{"s-tagged": true, "s-adopted": true} {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if uids[ns+"/"+p.Name] != p.UID {
				t.Errorf("pod %s/%s is new after the handover: nothing should restart", ns, p.Name)
			}
		}
	}

	e.abort("hand", v1alpha1.AbortAll)
	testkit.WaitFor(t, 30*time.Second, "the abort to be refused", func() (bool, error) {
		rm := e.migration("hand")
		return rm.Status.Phase == v1alpha1.MigrationSucceeded && strings.Contains(rm.Status.Reason, "nodewise tag set stable --revision 1-27"), nil
	})
	if l := e.labels("s-adopted"); l["istio.io/rev"] != "stable" {
		t.Errorf("the ignored abort relabelled s-adopted: %v", l)
	}
}

// TestStableTagHandoverKilledAtEveryStep: the handover survives a controller
// killed after each persisted step (each namespace's patch, the status). After
// every death each moved namespace is on the canary or on the stable tag,
// never anything else, and none is on the stable tag before the tag points at
// 1-28 (a namespace relabelled first would get 1.27.3 on its next pods). The
// migration itself runs in-process and is held before the handover by a
// namespace still on the stable tag, relabelled once that controller stops.
func TestStableTagHandoverKilledAtEveryStep(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client
	if err := revtag.Set(ctx, cs, revtag.SetOptions{Tag: "stable", Revision: "1-27"}); err != nil {
		t.Fatal(err)
	}
	e.namespace("k-tagged", map[string]string{"istio.io/rev": "stable", "move": "yes"}, app{name: "web", replicas: 1})
	e.namespace("k-adopted", map[string]string{"istio-injection": "enabled", "move": "yes"}, app{name: "web", replicas: 1})
	e.namespace("k-hold", map[string]string{"istio.io/rev": "stable"})
	e.allOn(2*time.Minute, "1.27.3", 1, "k-tagged", "k-adopted")
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "kill"}, Spec: v1alpha1.RevisionMigrationSpec{
		From: "1-27", To: "1-28", StableTag: "stable", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5},
		Waves: []v1alpha1.Wave{{Name: "all", NamespaceSelector: &v1alpha1.WaveSelector{MatchLabels: map[string]v1alpha1.LabelValue{"move": "yes"}}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := e.controller(nil)
	e.waitCondition("kill", revisions.ConditionTagHandedOver, metav1.ConditionFalse)
	stop()
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, "k-hold", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/rev":"1-27"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	handedOver := func() bool {
		return meta.IsStatusConditionTrue(e.migration("kill").Status.Conditions, revisions.ConditionTagHandedOver)
	}
	check := func(deaths int) {
		rev, err := revtag.Get(ctx, cs, "stable")
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range []string{"k-tagged", "k-adopted"} {
			l := e.labels(ns)
			if _, inj := l["istio-injection"]; inj || (l["istio.io/rev"] != "canary" && l["istio.io/rev"] != "stable") {
				t.Fatalf("after death %d: %s labelled %v, want istio.io/rev canary or stable and no istio-injection", deaths, ns, l)
			}
			if l["istio.io/rev"] == "stable" && rev != "1-28" {
				t.Fatalf("after death %d: %s is on tag stable while it points at %s", deaths, ns, rev)
			}
		}
	}
	deaths := e.controllerUntil(2*time.Minute, handedOver, check)
	t.Logf("FIGURE: the handover took %d controller processes, each killed after one persisted step", deaths)
	if deaths < 3 {
		t.Errorf("the handover took %d controller deaths, want one per namespace patch and one for the status (3)", deaths)
	}
	for _, ns := range []string{"k-tagged", "k-adopted"} {
		if l := e.labels(ns); l["istio.io/rev"] != "stable" {
			t.Errorf("%s labelled %v after the handover", ns, l)
		}
	}
	e.allOn(time.Minute, "1.28.1", 1, "k-tagged", "k-adopted")
}

// waitCondition waits for the migration's condition typ to have status and
// returns it.
func (e *env) waitCondition(name, typ string, status metav1.ConditionStatus) metav1.Condition {
	e.t.Helper()
	var got metav1.Condition
	testkit.WaitFor(e.t, time.Minute, name+" condition "+typ+"="+string(status), func() (bool, error) {
		c := meta.FindStatusCondition(e.migration(name).Status.Conditions, typ)
		if c == nil {
			return false, nil
		}
		got = *c
		return c.Status == status, nil
	})
	return got
}

func (e *env) labels(ns string) map[string]string {
	e.t.Helper()
	live, err := e.c.Client.CoreV1().Namespaces().Get(e.ctx, ns, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return live.Labels
}

// differingLabels are the keys of want that live lacks or holds with
// another value, and the keys live adds (the API server's own
// kubernetes.io/metadata.name aside).
func differingLabels(want, live map[string]string) map[string]bool {
	d := map[string]bool{}
	for k, v := range want {
		if w, ok := live[k]; !ok || w != v {
			d[k] = true
		}
	}
	for k := range live {
		if _, ok := want[k]; !ok && k != corev1.LabelMetadataName {
			d[k] = true
		}
	}
	return d
}

// labelAt evaluates an RFC 6901 JSON pointer on obj, as Argo CD does, and
// returns the label it selects ("" and false when it selects nothing, or
// something other than a label).
func labelAt(obj map[string]any, pointer string) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	for i := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(parts[i], "~1", "/"), "~0", "~")
	}
	var cur any = obj
	for _, p := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		if cur, ok = m[p]; !ok {
			return "", false
		}
	}
	if len(parts) != 3 || parts[0] != "metadata" || parts[1] != "labels" {
		return "", false
	}
	return parts[2], true
}

func asJSON(t *testing.T, o any) map[string]any {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func equalSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
