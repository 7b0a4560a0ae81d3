package observe

import (
	"errors"
	"reflect"
	"sort"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"

	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// revision is a ControllerRevision of hash and number owned by owner.
func revision(name, hash string, number int64, owner types.UID) *appsv1.ControllerRevision {
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: name,
			Labels:          map[string]string{model.LabelControllerRevisionHash: hash},
			OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "x", UID: owner}}},
		Revision: number,
	}
}

// TestTargetReadsTheDaemonSetAndItsNewestRevision: a found DaemonSet gives
// its UID, strategy, images, whether its controller observed its template,
// and the hash of its newest ControllerRevision among the ones it owns (a
// newer revision of another owner is ignored).
func TestTargetReadsTheDaemonSetAndItsNewestRevision(t *testing.T) {
	ds := fixture.SurgeDS.DeepCopy()
	ds.Generation, ds.Status.ObservedGeneration = 3, 2 // the controller is behind
	ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
	ds.Spec.Template.Spec.Containers = append(ds.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "x/sidecar:2"})
	tg := Targets{
		DaemonSets: appslisters.NewDaemonSetLister(newIndexer(ds)),
		Revisions: appslisters.NewControllerRevisionLister(newIndexer(
			revision("ztunnel-1", "old", 1, ds.UID),
			revision("ztunnel-3", "newest", 3, ds.UID),
			revision("ztunnel-2", "mid", 2, ds.UID),
			revision("other-9", "foreign", 9, "another-uid"),
		)),
	}
	got, err := tg.Target(fixture.ZtunnelTarget)
	if err != nil {
		t.Fatal(err)
	}
	want := model.TargetView{Ref: fixture.ZtunnelTarget, Found: true, UID: ds.UID, Strategy: appsv1.OnDeleteDaemonSetStrategyType,
		NewestHash: "newest", Images: []string{"istio/ztunnel:1.28.1", "x/sidecar:2"}, Settled: false}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Target =\n %+v\nwant\n %+v", got, want)
	}

	// Observed by the controller but with no revision of its own in the
	// cache yet: no newest hash, and not settled, so the plan waits for it
	// (a freshly installed chart; `nodewise apply` must not refuse it).
	ds.Status.ObservedGeneration = 3
	tg.DaemonSets = appslisters.NewDaemonSetLister(newIndexer(ds))
	tg.Revisions = appslisters.NewControllerRevisionLister(newIndexer(revision("other-9", "foreign", 9, "another-uid")))
	got, err = tg.Target(fixture.ZtunnelTarget)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Found || got.Settled || got.NewestHash != "" {
		t.Errorf("settled DaemonSet without revisions: %+v", got)
	}
}

// TestTargetErrors: a DaemonSet missing from the cache is a target not
// found, not an error; any other read failure of the DaemonSet or its
// revisions is returned, wrapped so the API error stays recognisable.
func TestTargetErrors(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "daemonsets"}
	forbidden := apierrors.NewForbidden(gr, "ztunnel", errors.New("RBAC"))
	empty := appslisters.NewControllerRevisionLister(newIndexer())

	// NotFound, from the cache (an empty indexer) and from a lister that
	// answers with the API's NotFound.
	for name, lister := range map[string]appslisters.DaemonSetLister{
		"missing from the cache": appslisters.NewDaemonSetLister(newIndexer()),
		"NotFound from a read":   fixture.FailingDaemonSets{Err: apierrors.NewNotFound(gr, "ztunnel")},
	} {
		tv, err := Targets{DaemonSets: lister, Revisions: empty}.Target(fixture.ZtunnelTarget)
		if err != nil {
			t.Errorf("%s: %v; want a target not found, no error", name, err)
		}
		if tv.Found || tv.Ref != fixture.ZtunnelTarget {
			t.Errorf("%s: %+v; want Found=false and the ref", name, tv)
		}
	}

	_, err := Targets{DaemonSets: fixture.FailingDaemonSets{Err: forbidden}, Revisions: empty}.Target(fixture.ZtunnelTarget)
	if !apierrors.IsForbidden(err) {
		t.Errorf("a forbidden DaemonSet read = %v; want the Forbidden error returned", err)
	}

	listFailed := errors.New("revisions unavailable")
	tv, err := Targets{
		DaemonSets: appslisters.NewDaemonSetLister(newIndexer(fixture.SurgeDS.DeepCopy())),
		Revisions:  fixture.FailingRevisions{Err: listFailed},
	}.Target(fixture.ZtunnelTarget)
	if !errors.Is(err, listFailed) {
		t.Errorf("a failed revision list = %v; want it returned", err)
	}
	if !tv.Found {
		t.Error("the DaemonSet was read before the revisions failed; Found should say so")
	}
}

// TestTargetsOnNode: a target's pods on a node are its own (owner UID) in
// its namespace, live and terminating counted apart; other nodes', other
// owners' and other namespaces' pods are left out.
func TestTargetsOnNode(t *testing.T) {
	tv := model.TargetView{Ref: fixture.ZtunnelTarget, Found: true, UID: "ds-uid"}
	elsewhere := fixture.SurgePod("ns-copy", "new", 0)
	elsewhere.Namespace = "kube-system"
	foreign := fixture.SurgePod("foreign", "new", 0)
	foreign.OwnerReferences[0].UID = "other-uid"
	tg := Targets{Pods: NewPodCache(newIndexer(
		fixture.SurgePod("live-1", "new", 0),
		fixture.SurgePod("live-2", "old", 0, fixture.NotReady),
		fixture.SurgePod("going-1", "old", 0, fixture.Terminating),
		fixture.SurgePod("going-2", "old", 0, fixture.Terminating),
		fixture.SurgePod("on-n2", "new", 0, fixture.OnNode("n2")),
		elsewhere, foreign,
		fixture.SurgePod("b", "new", 0, fixture.Bridged), // owned by its anchor pod, not the DaemonSet
	))}
	live, terminating, err := tg.OnNode(tv, "n1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range live {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	if !reflect.DeepEqual(names, []string{"live-1", "live-2"}) || terminating != 2 {
		t.Errorf("OnNode(n1) = live %v, %d terminating; want [live-1 live-2], 2", names, terminating)
	}

	// A pod cache that fails is an error naming the node, the cause kept.
	listFailed := errors.New("cache closed")
	if _, _, err := (Targets{Pods: PodCache{PodLister: fixture.FailingPods{Err: listFailed}}}).OnNode(tv, "n1"); !errors.Is(err, listFailed) {
		t.Errorf("OnNode on a failing cache = %v; want %v wrapped", err, listFailed)
	}
}

// TestPodView: the planner's view of a pod carries its hash, readiness and
// termination.
func TestPodView(t *testing.T) {
	for _, tc := range []struct {
		pod  *corev1.Pod
		want model.PodView
	}{
		{fixture.SurgePod("a", "new", 0), model.PodView{Name: "a", UID: "a-uid", Hash: "new", Ready: true}},
		{fixture.SurgePod("b", "old", 0, fixture.NotReady, fixture.Terminating), model.PodView{Name: "b", UID: "b-uid", Hash: "old", Terminating: true}},
	} {
		if got := PodView(tc.pod); got != tc.want {
			t.Errorf("PodView(%s) = %+v, want %+v", tc.pod.Name, got, tc.want)
		}
	}
}

// TestTargetIsNotSettledUntilItsRevisionIsCached: the DaemonSet's cache can
// show its controller observed a new template before the revision cache holds
// the revision made for it. The newest revision known is then the old
// template's (every pod would look up to date): not settled until the
// revision of the current template is there.
func TestTargetIsNotSettledUntilItsRevisionIsCached(t *testing.T) {
	ds := fixture.SurgeDS.DeepCopy()
	ds.Generation, ds.Status.ObservedGeneration = 4, 4
	withTemplate := func(r *appsv1.ControllerRevision, image string) *appsv1.ControllerRevision {
		r.Data.Raw = []byte(`{"spec":{"template":{"$patch":"replace","spec":{"containers":[{"name":"` +
			ds.Spec.Template.Spec.Containers[0].Name + `","image":"` + image + `"}]}}}}`)
		return r
	}
	old := withTemplate(revision("ztunnel-1", "old", 1, ds.UID), "istio/ztunnel:1.27.3")
	for _, tc := range []struct {
		name    string
		revs    []*appsv1.ControllerRevision
		settled bool
		hash    string
	}{
		{"only the old template's revision cached", []*appsv1.ControllerRevision{old}, false, "old"},
		{"the current template's revision cached", []*appsv1.ControllerRevision{old, withTemplate(revision("ztunnel-2", "new", 2, ds.UID), ds.Spec.Template.Spec.Containers[0].Image)}, true, "new"},
		{"a revision without data", []*appsv1.ControllerRevision{revision("ztunnel-2", "new", 2, ds.UID)}, true, "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []any{}
			for _, r := range tc.revs {
				objs = append(objs, r)
			}
			tg := Targets{DaemonSets: appslisters.NewDaemonSetLister(newIndexer(ds)), Revisions: appslisters.NewControllerRevisionLister(newIndexer(objs...))}
			got, err := tg.Target(fixture.ZtunnelTarget)
			if err != nil {
				t.Fatal(err)
			}
			if got.Settled != tc.settled || got.NewestHash != tc.hash {
				t.Errorf("Settled %v, NewestHash %q; want %v, %q", got.Settled, got.NewestHash, tc.settled, tc.hash)
			}
		})
	}
}
