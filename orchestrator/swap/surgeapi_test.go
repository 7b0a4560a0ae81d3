package swap

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestObserveSurge: the surge step's input read from the API is the
// DaemonSet, the newest ControllerRevision it controls (not an older one,
// nor another DaemonSet's with a higher number), and its namespace's pods
// on the node, listed by a spec.nodeName field selector.
func TestObserveSurge(t *testing.T) {
	c := newCluster(t, fixture.SurgeDS, fixture.SurgePod("old", "old", 0), fixture.SurgePod("elsewhere", "old", 0, fixture.OnNode("n2")))
	older := fixture.SurgeRev.DeepCopy()
	older.Labels[model.LabelControllerRevisionHash], older.Revision = "old", 1
	other := fixture.SurgeDS.DeepCopy()
	other.Name, other.UID = "other", "other-uid"
	foreign := fixture.SurgeRev.DeepCopy()
	foreign.Labels[model.LabelControllerRevisionHash], foreign.Revision = "foreign", 9
	for _, r := range []struct {
		ds  *appsv1.DaemonSet
		rev *appsv1.ControllerRevision
	}{{fixture.SurgeDS, older}, {other, foreign}} {
		rc := newCaches(nil)
		rc.addDaemonSet(r.ds, r.rev)
		if err := c.kube.Tracker().Add(rc.revs.List()[0].(runtime.Object)); err != nil {
			t.Fatal(err)
		}
	}
	in, err := ObserveSurge(t.Context(), c.kube, fixture.ZtunnelTarget, "n1")
	if err != nil {
		t.Fatalf("ObserveSurge: %v", err)
	}
	if in.DaemonSet.UID != fixture.SurgeDS.UID || in.Node != "n1" {
		t.Errorf("input DaemonSet %s, node %s", in.DaemonSet.UID, in.Node)
	}
	if h := in.Revision.Labels[model.LabelControllerRevisionHash]; h != "new" {
		t.Errorf("newest revision %q, want the DaemonSet's newest, new", h)
	}
	if len(in.Pods) != 1 || in.Pods[0].Name != "old" {
		t.Errorf("pods %v; want old alone (elsewhere is on n2)", in.Pods)
	}
	var selectors []string
	for _, a := range c.kube.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource() == podsGVR {
			selectors = append(selectors, l.GetListRestrictions().Fields.String())
		}
	}
	if strings.Join(selectors, ";") != "spec.nodeName=n1" {
		t.Errorf("pod lists with field selectors %q; want one, spec.nodeName=n1", selectors)
	}
}

// TestObserveSurgeErrors: each failed read is returned wrapped, naming
// what was read; an unsettled DaemonSet is errUnsettled (Swap waits on
// it), one with no revision an error.
func TestObserveSurgeErrors(t *testing.T) {
	internal := apierrors.NewInternalError(errors.New("etcd timeout"))
	for _, tc := range []struct {
		name     string
		ds       *appsv1.DaemonSet
		failList string // a resource whose list answers 500
		noRev    bool
		want     func(error) bool
		wantText string
	}{
		{name: "DaemonSet NotFound", want: apierrors.IsNotFound, wantText: "reading DaemonSet istio-system/ztunnel"},
		{name: "revisions list 500", ds: fixture.SurgeDS, failList: "controllerrevisions", want: apierrors.IsInternalError, wantText: "listing ControllerRevisions in istio-system"},
		{name: "pods list 500", ds: fixture.SurgeDS, failList: "pods", want: apierrors.IsInternalError, wantText: "listing pods on node n1 in istio-system"},
		{name: "unsettled DaemonSet", ds: unsettled(fixture.SurgeDS), want: func(err error) bool { return errors.Is(err, errUnsettled) }},
		{name: "no ControllerRevision", ds: fixture.SurgeDS, noRev: true, want: func(err error) bool { return err != nil }, wantText: "has no ControllerRevision yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.ds, fixture.SurgePod("old", "old", 0))
			if tc.noRev {
				if err := c.kube.Tracker().Delete(appsv1.SchemeGroupVersion.WithResource("controllerrevisions"), "istio-system", "ztunnel-new"); err != nil {
					t.Fatal(err)
				}
			}
			if tc.failList != "" {
				c.kube.PrependReactor("list", tc.failList, func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, internal })
			}
			in, err := ObserveSurge(t.Context(), c.kube, fixture.ZtunnelTarget, "n1")
			if !tc.want(err) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("ObserveSurge: %v; not the error wanted (%q)", err, tc.wantText)
			}
			if in.Node != "n1" || in.Revision != nil {
				t.Errorf("input on error %+v; want the node alone", in)
			}
		})
	}
}

// TestSurgerApply: each step's writes and how the API's answers count.
// A create meeting AlreadyExists is this swap's bridge (its name is the
// node's and the revision's), unless that pod is Failed: it is deleted and
// the step fails with ErrSurgeBridgeFailed. A delete answering NotFound
// (already gone) or Conflict (the UID precondition: another pod holds the
// name now) is done; any other error stops the step, the pods retired
// before it counted.
func TestSurgerApply(t *testing.T) {
	old := fixture.SurgePod("old", "old", 0)
	mid := fixture.SurgePod("mid", "mid", time.Minute)
	b := BridgePod(fixture.SurgeDS, fixture.SurgeRev, "n1", old)
	create := SurgeStep{Kind: SurgeCreateBridge, Bridge: b, Anchor: old, Pod: old}
	retire := SurgeStep{Kind: SurgeRetire, Older: []*corev1.Pod{mid, old}, HandOver: true, Pod: b}
	existing := func(opts ...fixture.PodOpt) func(c *cluster) {
		return func(c *cluster) {
			p := b.DeepCopy()
			p.UID, p.CreationTimestamp = "first-uid", metav1.NewTime(fixture.SurgeT0)
			running(false)(p)
			for _, o := range opts {
				o(p)
			}
			c.put(p)
		}
	}
	forbidden := apierrors.NewForbidden(podsGR, "x", errors.New("RBAC: pods is forbidden"))
	for _, tc := range []struct {
		name        string
		step        SurgeStep
		setup       func(c *cluster)
		wantErr     func(error) bool
		wantBridge  string
		wantRetired []string
		wantWrites  int
		wantExpect  int
		wantAPI     []string // sorted
	}{
		{name: "create", step: create, wantBridge: b.Name, wantWrites: 1, wantExpect: 1, wantAPI: []string{"mid", "old", b.Name}},
		{name: "create AlreadyExists: the swap's own bridge, taken as created", step: create, setup: existing(),
			wantBridge: b.Name, wantWrites: 1, wantExpect: 1, wantAPI: []string{"mid", "old", b.Name}},
		{name: "create AlreadyExists, the bridge Failed: deleted, ErrSurgeBridgeFailed", step: create, setup: existing(fixture.OutOfCPU),
			wantErr: func(err error) bool { return errors.Is(err, ErrSurgeBridgeFailed) }, wantWrites: 1, wantAPI: []string{"mid", "old"}},
		{name: "create Forbidden: the error, nothing counted", step: create, setup: func(c *cluster) { c.fail("create", "", forbidden) },
			wantErr: apierrors.IsForbidden, wantAPI: []string{"mid", "old"}},
		{name: "retire: the older pods deleted, the anchor last", step: retire,
			wantRetired: []string{"mid", "old"}, wantWrites: 2, wantExpect: 2, wantAPI: nil},
		{name: "retire NotFound: already gone, done", step: retire, setup: func(c *cluster) { _ = c.kube.Tracker().Delete(podsGVR, "istio-system", "old") },
			wantRetired: []string{"mid", "old"}, wantWrites: 2, wantExpect: 2, wantAPI: nil},
		{name: "retire Conflict: a new pod of the name, spared", step: retire,
			setup: func(c *cluster) {
				c.put(fixture.SurgePod("mid", "new", time.Hour, func(p *corev1.Pod) { p.UID = "recreated-uid" }))
			},
			wantRetired: []string{"mid", "old"}, wantWrites: 2, wantExpect: 2, wantAPI: []string{"mid"}},
		{name: "retire Forbidden on the anchor: the error, the first retire counted", step: retire, setup: func(c *cluster) { c.fail("delete", "old", forbidden) },
			wantErr: apierrors.IsForbidden, wantRetired: []string{"mid"}, wantWrites: 1, wantExpect: 1, wantAPI: []string{"old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, fixture.SurgeDS, old, mid)
			if tc.setup != nil {
				tc.setup(c)
			}
			var res SurgeResult
			err := c.surger().Apply(t.Context(), tc.step, &res)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Apply: %v", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Fatalf("Apply: %v; not the error wanted", err)
			}
			if res.Bridge != tc.wantBridge || strings.Join(res.Retired, ",") != strings.Join(tc.wantRetired, ",") || res.Writes != tc.wantWrites || len(res.expect) != tc.wantExpect {
				t.Errorf("result bridge=%q retired=%v writes=%d expect=%d; want %q %v %d %d",
					res.Bridge, res.Retired, res.Writes, len(res.expect), tc.wantBridge, tc.wantRetired, tc.wantWrites, tc.wantExpect)
			}
			pods := c.apiPods()
			if got := sortedNames(pods); strings.Join(got, ",") != strings.Join(tc.wantAPI, ",") {
				t.Errorf("pods in the API %v, want %v", got, tc.wantAPI)
			}
			if p, ok := pods[b.Name]; ok && tc.setup != nil && p.UID != "first-uid" {
				t.Errorf("the bridge found already there was replaced (UID %s)", p.UID)
			}
		})
	}
}

// TestSurgerAbandon: Abandon reads the node from the API and deletes its
// never-Ready bridges (a Failed one too), by UID; a Ready bridge is the
// newest ztunnel and stays, as does the old pod. A failed read or delete is
// returned.
func TestSurgerAbandon(t *testing.T) {
	old := fixture.SurgePod("old", "old", 0)
	bridge := func(opts ...fixture.PodOpt) *corev1.Pod {
		b := BridgePod(fixture.SurgeDS, fixture.SurgeRev, "n1", old)
		b.UID, b.CreationTimestamp = "b-uid", metav1.NewTime(fixture.SurgeT0.Add(time.Hour))
		running(true)(b)
		for _, o := range opts {
			o(b)
		}
		return b
	}
	name := bridge().Name
	for _, tc := range []struct {
		name       string
		ds         *appsv1.DaemonSet
		pods       []*corev1.Pod
		setup      func(c *cluster)
		wantErr    func(error) bool
		wantWrites int
		wantAPI    []string
	}{
		{name: "never-Ready bridge deleted", ds: fixture.SurgeDS, pods: []*corev1.Pod{old, bridge(fixture.NotReady)}, wantWrites: 1, wantAPI: []string{"old"}},
		{name: "Failed bridge deleted", ds: fixture.SurgeDS, pods: []*corev1.Pod{old, bridge(fixture.OutOfCPU)}, wantWrites: 1, wantAPI: []string{"old"}},
		{name: "Ready bridge kept", ds: fixture.SurgeDS, pods: []*corev1.Pod{old, bridge()}, wantAPI: []string{"old", name}},
		{name: "bridge delete Forbidden: the error", ds: fixture.SurgeDS, pods: []*corev1.Pod{old, bridge(fixture.NotReady)},
			setup:   func(c *cluster) { c.fail("delete", "", apierrors.NewForbidden(podsGR, name, errors.New("RBAC"))) },
			wantErr: apierrors.IsForbidden, wantAPI: []string{"old", name}},
		{name: "no DaemonSet: the read error, nothing deleted", pods: []*corev1.Pod{old, bridge(fixture.NotReady)},
			wantErr: apierrors.IsNotFound, wantAPI: []string{"old", name}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.ds, tc.pods...)
			if tc.setup != nil {
				tc.setup(c)
			}
			res, err := Surger{Kube: c.kube}.Abandon(t.Context(), fixture.ZtunnelTarget, "n1")
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Abandon: %v", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Fatalf("Abandon: %v; not the error wanted", err)
			}
			if res.Writes != tc.wantWrites {
				t.Errorf("%d writes, want %d", res.Writes, tc.wantWrites)
			}
			if got := sortedNames(c.apiPods()); strings.Join(got, ",") != strings.Join(tc.wantAPI, ",") {
				t.Errorf("pods in the API %v, want %v", got, tc.wantAPI)
			}
			_, opts := c.podWrites()
			for _, o := range opts {
				if o.Preconditions == nil || o.Preconditions.UID == nil || *o.Preconditions.UID != "b-uid" {
					t.Errorf("delete options %+v; want the bridge's UID as the precondition", o)
				}
			}
		})
	}
}

// TestSurgerSwapFromTheAPI: Swap observing the API (no Observe) waits on an
// unsettled DaemonSet until its deadline and then times out saying so
// (nothing to clean up: the node was never read); a failed read is
// returned; a cancelled context ends the wait, no write made.
func TestSurgerSwapFromTheAPI(t *testing.T) {
	old := fixture.SurgePod("old", "old", 0)
	for _, tc := range []struct {
		name      string
		ds        *appsv1.DaemonSet
		deadline  time.Duration // from the cluster's clock
		cancelled bool
		want      func(error) bool
		wantText  string
	}{
		{name: "unsettled past the deadline: ErrSurgeTimeout", ds: unsettled(fixture.SurgeDS), deadline: -time.Minute,
			want: func(err error) bool { return errors.Is(err, ErrSurgeTimeout) }, wantText: "has not observed the current template"},
		{name: "DaemonSet NotFound: the read error", deadline: time.Minute, want: apierrors.IsNotFound},
		{name: "cancelled while unsettled", ds: unsettled(fixture.SurgeDS), deadline: time.Minute, cancelled: true,
			want: func(err error) bool { return errors.Is(err, context.Canceled) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.ds, old)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a safety net: no case waits
			if tc.cancelled {
				cancel()
			}
			defer cancel()
			res, err := c.surger().Swap(ctx, fixture.ZtunnelTarget, "n1", c.now.Add(tc.deadline))
			if !tc.want(err) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("Swap: %v; not the error wanted (%q)", err, tc.wantText)
			}
			if writes, _ := c.podWrites(); len(writes) != 0 || res.Writes != 0 {
				t.Errorf("writes %v (%d counted); want none", writes, res.Writes)
			}
		})
	}
}
