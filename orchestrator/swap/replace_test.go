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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// TestReplaceSwap: the swap in place deletes the node's old pod by UID and
// waits for the DaemonSet controller's new pod to be Ready on the newest
// revision. A delete of a pod already gone (NotFound) or replaced by
// another of its name (the UID precondition's 409) is no error; a delete the
// API refuses for good halts swap_failed with its reason; any other error
// is returned plain, for the worker to retry; a new pod not Ready by the
// deadline (the fake clock) halts swap_timeout saying why.
func TestReplaceSwap(t *testing.T) {
	old, newReady := fixture.SurgePod("old", "old", 0), fixture.SurgePod("new", "new", time.Hour)
	late := func(c *cluster) { c.now = c.now.Add(2 * time.Minute) } // past the one-minute deadline
	for _, tc := range []struct {
		name  string
		ds    bool          // the DaemonSet is cached
		pods  []*corev1.Pod // in the API and the caches
		setup func(c *cluster)
		// controller acts on the old pod's deletion (the DaemonSet
		// controller, the kubelet, time passing).
		controller  func(c *cluster)
		wantErr     func(error) bool // nil: no error
		wantHalt    string
		wantReason  string   // in the error
		wantDeletes []string // the deletes asked, each by UID
		wantAPI     []string // the pods left in the API, sorted
	}{
		{name: "old pod deleted, the DaemonSet's new pod Ready: done", ds: true, pods: []*corev1.Pod{old},
			controller:  func(c *cluster) { c.put(newReady) },
			wantDeletes: []string{"old"}, wantAPI: []string{"new"}},
		{name: "a pod already on the newest revision is never deleted", ds: true, pods: []*corev1.Pod{newReady},
			wantAPI: []string{"new"}},
		{name: "delete NotFound: the cache lagged, the pod is already gone", ds: true, pods: []*corev1.Pod{old, newReady},
			setup:       func(c *cluster) { _ = c.kube.Tracker().Delete(podsGVR, old.Namespace, old.Name) },
			wantDeletes: []string{"old"}, wantAPI: []string{"new"}},
		{name: "delete Conflict: the UID precondition spares a new pod of the same name", ds: true, pods: []*corev1.Pod{old},
			setup: func(c *cluster) {
				c.put(fixture.SurgePod("old", "new", time.Hour, func(p *corev1.Pod) { p.UID = "recreated-uid" }))
			},
			wantDeletes: []string{"old"}, wantAPI: []string{"old"}},
		{name: "delete Forbidden: halt swap_failed with the API's reason, the old pod kept", ds: true, pods: []*corev1.Pod{old},
			setup: func(c *cluster) {
				c.fail("delete", "", apierrors.NewForbidden(podsGR, "old", errors.New("admission webhook denied the request")))
			},
			wantErr: isStepError, wantHalt: nodestep.HaltSwapFailed, wantReason: "admission webhook denied", wantDeletes: []string{"old"}, wantAPI: []string{"old"}},
		{name: "delete Invalid: refused for good too, halt swap_failed", ds: true, pods: []*corev1.Pod{old},
			setup: func(c *cluster) {
				c.fail("delete", "", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "old", field.ErrorList{field.Forbidden(field.NewPath("metadata"), "policy")}))
			},
			wantErr: isStepError, wantHalt: nodestep.HaltSwapFailed, wantDeletes: []string{"old"}, wantAPI: []string{"old"}},
		{name: "delete answering 500: a plain error, retried by the worker", ds: true, pods: []*corev1.Pod{old},
			setup:   func(c *cluster) { c.fail("delete", "", apierrors.NewInternalError(errors.New("etcd leader changed"))) },
			wantErr: apierrors.IsInternalError, wantReason: "deleting pod istio-system/old", wantDeletes: []string{"old"}, wantAPI: []string{"old"}},
		{name: "new pod never Ready: halt swap_timeout naming its waiting reason", ds: true, pods: []*corev1.Pod{old},
			controller: func(c *cluster) {
				c.put(fixture.SurgePod("new", "new", time.Hour, crashLooping))
				late(c)
			},
			wantErr: isStepError, wantHalt: nodestep.HaltSwapTimeout, wantReason: "pod new on revision new is not Ready (CrashLoopBackOff, 3 restarts)",
			wantDeletes: []string{"old"}, wantAPI: []string{"new"}},
		{name: "no new pod: halt swap_timeout, no pod scheduled yet", ds: true, pods: []*corev1.Pod{old},
			controller: late,
			wantErr:    isStepError, wantHalt: nodestep.HaltSwapTimeout, wantReason: "no pod scheduled yet", wantDeletes: []string{"old"}},
		{name: "the DaemonSet controller brings an older revision back: halt swap_timeout naming it", ds: true, pods: []*corev1.Pod{old},
			controller: func(c *cluster) {
				c.put(fixture.SurgePod("again", "old", time.Hour))
				late(c)
			},
			wantErr: isStepError, wantHalt: nodestep.HaltSwapTimeout, wantReason: "pod again is on revision old, not new",
			wantDeletes: []string{"old"}, wantAPI: []string{"again"}},
		{name: "no DaemonSet: halt preflight_failed before any delete", pods: []*corev1.Pod{old},
			wantErr: isStepError, wantHalt: nodestep.HaltPreflightFailed, wantReason: "disappeared", wantAPI: []string{"old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *cluster
			if tc.ds {
				c = newCluster(t, fixture.SurgeDS, tc.pods...)
			} else {
				c = newCluster(t, nil, tc.pods...)
			}
			if tc.setup != nil {
				tc.setup(c)
			}
			if tc.controller != nil {
				c.controller = func(*corev1.Pod) { tc.controller(c) }
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a safety net: no case waits
			defer cancel()
			err := c.replace().Swap(ctx, fixture.ZtunnelTarget, "n1", c.now.Add(time.Minute), time.Minute)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Swap: %v; want done", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Fatalf("Swap: %v (%T); not the error wanted", err, err)
			}
			if got := halt(err); got != tc.wantHalt {
				t.Errorf("halt %q, want %q (%v)", got, tc.wantHalt, err)
			}
			if tc.wantReason != "" && !strings.Contains(err.Error(), tc.wantReason) {
				t.Errorf("error %q does not say %q", err, tc.wantReason)
			}
			writes, opts := c.podWrites()
			var want []string
			for _, n := range tc.wantDeletes {
				want = append(want, "delete "+n)
			}
			if strings.Join(writes, ",") != strings.Join(want, ",") {
				t.Errorf("writes %v, want %v", writes, want)
			}
			for _, o := range opts {
				if o.Preconditions == nil || o.Preconditions.UID == nil || *o.Preconditions.UID != old.UID {
					t.Errorf("delete options %+v; want the old pod's UID as the precondition", o)
				}
			}
			if got := sortedNames(c.apiPods()); strings.Join(got, ",") != strings.Join(tc.wantAPI, ",") {
				t.Errorf("pods in the API %v, want %v", got, tc.wantAPI)
			}
		})
	}
}

// TestReplaceSwapEndsWithItsContext: a swap waiting for the new pod returns
// its context's error at once when the context is cancelled, or when its
// deadline passes before the swap timeout (the fake clock stands still).
func TestReplaceSwapEndsWithItsContext(t *testing.T) {
	t.Run("cancelled", func(t *testing.T) {
		c := newCluster(t, fixture.SurgeDS, fixture.SurgePod("old", "old", 0))
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // cancelled below; the timeout is a safety net
		defer cancel()
		c.controller = func(*corev1.Pod) { cancel() } // cancelled while the new pod is awaited
		err := c.replace().Swap(ctx, fixture.ZtunnelTarget, "n1", c.now.Add(time.Minute), time.Minute)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Swap: %v; want context.Canceled", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		c := newCluster(t, fixture.SurgeDS, fixture.SurgePod("old", "old", 0))
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		err := c.replace().Swap(ctx, fixture.ZtunnelTarget, "n1", c.now.Add(time.Minute), time.Minute)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Swap: %v; want context.DeadlineExceeded", err)
		}
		if _, ok := c.apiPods()["old"]; ok {
			t.Errorf("the old pod was not deleted before the wait")
		}
	})
}

// TestReplaceSwapPodReadError: a swap that cannot read the node's pods
// returns the error and deletes nothing.
func TestReplaceSwapPodReadError(t *testing.T) {
	c := newCluster(t, fixture.SurgeDS, fixture.SurgePod("old", "old", 0))
	boom := errors.New("cache not synced")
	r := c.replace()
	r.Targets = &fakeTargets{views: []model.TargetView{view(true)}, onNodeErr: boom}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a safety net: no wait expected
	defer cancel()
	if err := r.Swap(ctx, fixture.ZtunnelTarget, "n1", c.now.Add(time.Minute), time.Minute); !errors.Is(err, boom) {
		t.Fatalf("Swap: %v; want the read error", err)
	}
	if writes, _ := c.podWrites(); len(writes) != 0 {
		t.Errorf("writes %v; want none", writes)
	}
}

// TestWaitsSettled: Settled returns the target once its DaemonSet's
// controller has observed the template, waking on the caches' changes; it
// halts preflight_failed when the DaemonSet is gone and swap_timeout when
// the deadline passes first, and returns read and context errors.
func TestWaitsSettled(t *testing.T) {
	now := fixture.SurgeT0
	boom := errors.New("cache read failed")
	for _, tc := range []struct {
		name      string
		views     []model.TargetView
		err       error
		now       time.Time // the clock; the deadline is now+1m
		cancelled bool
		wantReads int
		wantErr   func(error) bool
		wantHalt  string
	}{
		{name: "settled at once", views: []model.TargetView{view(true)}, now: now, wantReads: 1},
		{name: "settled at the next change", views: []model.TargetView{view(false), view(false), view(true)}, now: now, wantReads: 3},
		{name: "DaemonSet gone: halt preflight_failed", views: []model.TargetView{{Ref: fixture.ZtunnelTarget}}, now: now, wantReads: 1,
			wantErr: isStepError, wantHalt: nodestep.HaltPreflightFailed},
		{name: "unsettled past the deadline: halt swap_timeout", views: []model.TargetView{view(false)}, now: now.Add(time.Hour), wantReads: 1,
			wantErr: isStepError, wantHalt: nodestep.HaltSwapTimeout},
		{name: "cache read error", err: boom, now: now, wantErr: func(err error) bool { return errors.Is(err, boom) }},
		{name: "unsettled, context cancelled", views: []model.TargetView{view(false)}, now: now, cancelled: true, wantReads: 1,
			wantErr: func(err error) bool { return errors.Is(err, context.Canceled) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changes := &observe.Changes{}
			f := &fakeTargets{views: tc.views, err: tc.err, changes: changes}
			w := Waits{Targets: f, Changes: changes, Now: func() time.Time { return tc.now }}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a safety net: no case waits
			if tc.cancelled {
				cancel()
			}
			defer cancel()
			tv, err := w.Settled(ctx, fixture.ZtunnelTarget, now.Add(time.Minute), time.Minute)
			if tc.wantErr == nil && (err != nil || !tv.Settled) {
				t.Fatalf("Settled: %+v, %v; want the settled target", tv, err)
			}
			if tc.wantErr != nil && !tc.wantErr(err) {
				t.Fatalf("Settled: %v; not the error wanted", err)
			}
			if got := halt(err); got != tc.wantHalt {
				t.Errorf("halt %q, want %q", got, tc.wantHalt)
			}
			if f.reads != tc.wantReads {
				t.Errorf("%d reads, want %d", f.reads, tc.wantReads)
			}
		})
	}
}

// TestWaitsReady: Ready waits through an unsettled DaemonSet for a Ready
// pod on the newest revision, says the DaemonSet is unsettled when it times
// out so, and returns the caches' read errors.
func TestWaitsReady(t *testing.T) {
	now := fixture.SurgeT0
	boom := errors.New("cache read failed")
	newReady := fixture.SurgePod("new", "new", time.Hour)
	for _, tc := range []struct {
		name       string
		f          *fakeTargets
		now        time.Time // the clock; the deadline is SurgeT0+1m
		wantErr    func(error) bool
		wantReason string
	}{
		{name: "Ready once the DaemonSet settles", f: &fakeTargets{views: []model.TargetView{view(false), view(true)}, live: []*corev1.Pod{newReady}}, now: now},
		{name: "unsettled past the deadline: swap_timeout saying so", f: &fakeTargets{views: []model.TargetView{view(false)}, live: []*corev1.Pod{newReady}},
			now: now.Add(time.Hour), wantErr: isStepError, wantReason: "has not observed the current template"},
		{name: "target read error", f: &fakeTargets{err: boom}, now: now, wantErr: func(err error) bool { return errors.Is(err, boom) }},
		{name: "pod read error", f: &fakeTargets{views: []model.TargetView{view(true)}, onNodeErr: boom}, now: now, wantErr: func(err error) bool { return errors.Is(err, boom) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.changes = &observe.Changes{}
			w := Waits{Targets: tc.f, Changes: tc.f.changes, Now: func() time.Time { return tc.now }}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a safety net: no case waits
			defer cancel()
			err := w.Ready(ctx, fixture.ZtunnelTarget, "n1", now.Add(time.Minute), time.Minute)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("Ready: %v; want nil", err)
			}
			if tc.wantErr != nil && !tc.wantErr(err) {
				t.Fatalf("Ready: %v; not the error wanted", err)
			}
			if tc.wantReason != "" && !strings.Contains(err.Error(), tc.wantReason) {
				t.Errorf("error %q does not say %q", err, tc.wantReason)
			}
		})
	}
}

// TestWaitsUpToDate: a node is up to date when every target has a Ready
// pod there on its newest revision (older pods still draining beside it do
// not matter); anything unknown (no DaemonSet, unsettled, a read error)
// reads as not up to date.
func TestWaitsUpToDate(t *testing.T) {
	cni := fixture.SurgeDS.DeepCopy()
	cni.Name, cni.UID = "istio-cni", "cni-uid"
	cniRef := v1alpha1.TargetRef{Namespace: cni.Namespace, Name: cni.Name, Kind: v1alpha1.TargetCNI}
	cniPod := func(name, hash string) *corev1.Pod {
		return fixture.SurgePod(name, hash, time.Hour, func(p *corev1.Pod) { p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = cni.Name, cni.UID })
	}
	ztunnel := []v1alpha1.TargetRef{fixture.ZtunnelTarget}
	for _, tc := range []struct {
		name    string
		ds      []byte // which DaemonSets are cached: z(tunnel), u(nsettled ztunnel), c(ni)
		pods    []*corev1.Pod
		targets []v1alpha1.TargetRef
		want    bool
	}{
		{"Ready on the newest revision", []byte("z"), []*corev1.Pod{fixture.SurgePod("new", "new", time.Hour)}, ztunnel, true},
		{"no targets", nil, nil, nil, true},
		{"the old pod still draining beside the new one", []byte("z"), []*corev1.Pod{fixture.SurgePod("old", "old", 0), fixture.SurgePod("new", "new", time.Hour)}, ztunnel, true},
		{"only a pod on an older revision", []byte("z"), []*corev1.Pod{fixture.SurgePod("old", "old", 0)}, ztunnel, false},
		{"the new pod not Ready", []byte("z"), []*corev1.Pod{fixture.SurgePod("new", "new", time.Hour, fixture.NotReady)}, ztunnel, false},
		{"the new pod on another node", []byte("z"), []*corev1.Pod{fixture.SurgePod("new", "new", time.Hour, fixture.OnNode("n2"))}, ztunnel, false},
		{"no pod", []byte("z"), nil, ztunnel, false},
		{"no DaemonSet", nil, []*corev1.Pod{fixture.SurgePod("new", "new", time.Hour)}, ztunnel, false},
		{"DaemonSet unsettled", []byte("u"), []*corev1.Pod{fixture.SurgePod("new", "new", time.Hour)}, ztunnel, false},
		{"ztunnel up to date, istio-cni not", []byte("zc"), []*corev1.Pod{fixture.SurgePod("new", "new", time.Hour), cniPod("cni-old", "old")},
			[]v1alpha1.TargetRef{fixture.ZtunnelTarget, cniRef}, false},
		{"both up to date", []byte("zc"), []*corev1.Pod{fixture.SurgePod("new", "new", time.Hour), cniPod("cni-new", "new")},
			[]v1alpha1.TargetRef{fixture.ZtunnelTarget, cniRef}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCaches(nil, tc.pods...)
			for _, d := range tc.ds {
				c.addDaemonSet(map[byte]*appsv1.DaemonSet{'z': fixture.SurgeDS, 'u': unsettled(fixture.SurgeDS), 'c': cni}[d], fixture.SurgeRev)
			}
			w := Waits{Targets: c.targets, Changes: &observe.Changes{}, Now: time.Now}
			if got := w.UpToDate(tc.targets, "n1"); got != tc.want {
				t.Errorf("UpToDate = %v, want %v", got, tc.want)
			}
		})
	}
	// Reads that fail: not up to date.
	boom := errors.New("cache read failed")
	for name, f := range map[string]*fakeTargets{
		"target read error": {err: boom},
		"pod read error":    {views: []model.TargetView{view(true)}, onNodeErr: boom},
	} {
		f.changes = &observe.Changes{}
		if (Waits{Targets: f}).UpToDate(ztunnel, "n1") {
			t.Errorf("%s: up to date; want not", name)
		}
	}
}
