package write

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// TestNodeConflictWaitsForTheCache: a conditional node patch that conflicts
// (someone wrote the node after the copy it was based on) is retried from
// the cache once the watch shows that write, without a read from the API.
func TestNodeConflictWaitsForTheCache(t *testing.T) {
	node := func(rv string, taint bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: rv}}
		if taint {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}
		}
		return n
	}
	kube := fake.NewClientset(node("8", true))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(node("7", false)) // the cache has not seen the taint
	w := &Nodes{Kube: kube, Cache: corelisters.NewNodeLister(idx), Changes: &observe.Changes{}, Now: time.Now, Log: zap.NewNop()}
	var patchRVs []string
	kube.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &body)
		patchRVs = append(patchRVs, body.Metadata.ResourceVersion)
		if body.Metadata.ResourceVersion != "8" {
			go func() { // the watch delivers the taint a little later
				time.Sleep(50 * time.Millisecond)
				_ = idx.Update(node("8", true))
				w.Changes.Broadcast()
			}()
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "a", errors.New("changed"))
		}
		return false, nil, nil
	})
	if _, err := w.Cordon(context.Background(), "r", "a", nodestep.Record{}, nil); err != nil {
		t.Fatalf("cordon: %v", err)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "get" {
			t.Errorf("the node was read from the API after the conflict: %v", a)
		}
	}
	if strings.Join(patchRVs, ",") != "7,8" {
		t.Errorf("patches conditional on %v; want 7, then 8 (the cache's copy after the watch)", patchRVs)
	}
}

// TestPatch: Patch sends one merge patch (annotations, nil deleting one;
// spec.unschedulable only when asked; resourceVersion only when given),
// returns the record the API answered and keeps that node for Newest. A
// stale resourceVersion, a Forbidden or a missing node is the API's error,
// wrapped, and leaves nothing remembered.
func TestPatch(t *testing.T) {
	const since = "2026-12-01T10:00:00Z"
	for _, tc := range []struct {
		name          string
		rv            string
		unschedulable *bool
		fail          error // answer to the patch, when set
		missing       bool  // the node does not exist
		wantErr       func(error) bool
		wantUnsched   bool
	}{
		{name: "unconditional, annotations only"},
		{name: "conditional on the resourceVersion read, cordoning", rv: "5", unschedulable: nodestep.Ptr(true), wantUnsched: true},
		{name: "stale resourceVersion: 409", rv: "4", wantErr: apierrors.IsConflict},
		{name: "forbidden", fail: apierrors.NewForbidden(nodesGR, "a", errors.New("rbac")), wantErr: apierrors.IsForbidden},
		{name: "node deleted", missing: true, wantErr: apierrors.IsNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var api []*corev1.Node
			if !tc.missing {
				api = append(api, testNode("a", "5", false, model.AnnotationCordonedBy, "old", "user/keep", "x"))
			}
			e := newNodesEnv(t, api, nil)
			if tc.fail != nil {
				failNodes(e.kube, "patch", tc.fail)
			}
			ann := map[string]*string{model.AnnotationStep: nodestep.Ptr("Swap"), model.AnnotationStepSince: nodestep.Ptr(since), model.AnnotationCordonedBy: nil}
			rec, err := e.w.Patch(t.Context(), "a", tc.rv, ann, tc.unschedulable)
			if tc.wantErr != nil {
				if !tc.wantErr(err) || !strings.Contains(fmt.Sprint(err), "patching node a") {
					t.Fatalf("err = %v; want the API's error, wrapped", err)
				}
				if e.w.Newest("a") != nil {
					t.Errorf("a failed patch was remembered")
				}
				return
			}
			if err != nil {
				t.Fatalf("Patch: %v", err)
			}
			patches := e.actions("patch")
			if len(patches) != 1 {
				t.Fatalf("%d patches; want 1", len(patches))
			}
			body := decodePatch(t, patches[0])
			if body.Metadata.ResourceVersion != tc.rv {
				t.Errorf("patch conditional on %q; want %q", body.Metadata.ResourceVersion, tc.rv)
			}
			if (body.Spec != nil) != (tc.unschedulable != nil) {
				t.Errorf("patch spec = %+v; want spec only when unschedulable is given", body.Spec)
			}
			n := e.stored(t, "a")
			if n.Spec.Unschedulable != tc.wantUnsched {
				t.Errorf("unschedulable = %v; want %v", n.Spec.Unschedulable, tc.wantUnsched)
			}
			if _, ok := n.Annotations[model.AnnotationCordonedBy]; ok || n.Annotations["user/keep"] != "x" || n.Annotations[model.AnnotationStep] != "Swap" {
				t.Errorf("annotations = %v; want step set, cordoned-by deleted, the rest kept", n.Annotations)
			}
			if rec.Step != "Swap" || rec.StepSince.Format(time.RFC3339) != since || rec.CordonedBy != "" {
				t.Errorf("record = %+v; want the API's answer parsed", rec)
			}
			if got := e.w.Newest("a"); got == nil || got.ResourceVersion != n.ResourceVersion {
				t.Errorf("Newest = %v; want the patched node at %s", got, n.ResourceVersion)
			}
		})
	}
}

// TestNewest: the cache once it holds this process's last step record,
// else the node the last patch returned, else the cache, else nil.
func TestNewest(t *testing.T) {
	const mine, older = "2026-12-01T10:05:00Z", "2026-12-01T10:00:00Z"
	for _, tc := range []struct {
		name   string
		patch  bool         // this process patched the node (step-since mine, rv 6)
		cached *corev1.Node // the informer's copy
		wantRV string       // "" = nil
	}{
		{name: "neither"},
		{name: "cache only", cached: testNode("a", "5", false), wantRV: "5"},
		{name: "own write only", patch: true, wantRV: "6"},
		{name: "cache behind the own write", patch: true, cached: testNode("a", "5", false, model.AnnotationStepSince, older), wantRV: "6"},
		{name: "cache caught up (and holds a later write)", patch: true, cached: testNode("a", "7", true, model.AnnotationStepSince, mine), wantRV: "7"},
		{name: "cache at the own write's version", patch: true, cached: testNode("a", "6", false, model.AnnotationStepSince, mine), wantRV: "6"},
		// A patch that left step-since as it was (a resumed cordon): the
		// cache's copy has the same step record but is the version the
		// patch replaced.
		{name: "cache at the replaced version, same step record", patch: true, cached: testNode("a", "5", false, model.AnnotationStepSince, mine), wantRV: "6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cached []*corev1.Node
			if tc.cached != nil {
				cached = append(cached, tc.cached)
			}
			e := newNodesEnv(t, []*corev1.Node{testNode("a", "5", false, model.AnnotationStepSince, older)}, cached)
			if tc.patch {
				if _, err := e.w.Patch(t.Context(), "a", "5", map[string]*string{model.AnnotationStepSince: nodestep.Ptr(mine)}, nil); err != nil {
					t.Fatal(err)
				}
			}
			got := e.w.Newest("a")
			switch {
			case tc.wantRV == "" && got != nil:
				t.Errorf("Newest = rv %s; want nil", got.ResourceVersion)
			case tc.wantRV != "" && (got == nil || got.ResourceVersion != tc.wantRV):
				t.Errorf("Newest = %v; want rv %s", got, tc.wantRV)
			}
		})
	}
}

// TestCordon: the cordon and its bookkeeping in one patch conditional on
// the copy read: the prior cordon is recorded once, only a cordon nodewise
// sets names the rollout, and nothing is written when nothing changes.
func TestCordon(t *testing.T) {
	with := map[string]*string{model.AnnotationStep: nodestep.Ptr("Swap")}
	for _, tc := range []struct {
		name       string
		node       *corev1.Node
		with       map[string]*string
		wantPatch  bool
		wantSpec   bool // the patch sets spec.unschedulable
		wantAnn    map[string]string
		wantRecord nodestep.Record
	}{
		{
			name: "schedulable node: cordoned by the rollout", node: testNode("a", "5", false), with: with,
			wantPatch: true, wantSpec: true,
			wantAnn:    map[string]string{model.AnnotationPriorUnschedulable: "false", model.AnnotationCordonedBy: "r", model.AnnotationStep: "Swap"},
			wantRecord: nodestep.Record{Step: "Swap", PriorUnschedulable: "false", CordonedBy: "r"},
		},
		{
			name: "cordoned by someone else: recorded as prior, not claimed", node: testNode("a", "5", true), with: with,
			wantPatch:  true,
			wantAnn:    map[string]string{model.AnnotationPriorUnschedulable: "true", model.AnnotationStep: "Swap"},
			wantRecord: nodestep.Record{Step: "Swap", PriorUnschedulable: "true"},
		},
		{
			name:       "resumed, already cordoned by the rollout: nothing to write",
			node:       testNode("a", "5", true, model.AnnotationPriorUnschedulable, "false", model.AnnotationCordonedBy, "r"),
			wantAnn:    map[string]string{model.AnnotationPriorUnschedulable: "false", model.AnnotationCordonedBy: "r"},
			wantRecord: nodestep.Record{PriorUnschedulable: "false", CordonedBy: "r"},
		},
		{
			name:      "resumed, uncordoned by a person since: cordoned again, the prior kept",
			node:      testNode("a", "5", false, model.AnnotationPriorUnschedulable, "false", model.AnnotationCordonedBy, "r"),
			wantPatch: true, wantSpec: true,
			wantAnn:    map[string]string{model.AnnotationPriorUnschedulable: "false", model.AnnotationCordonedBy: "r"},
			wantRecord: nodestep.Record{PriorUnschedulable: "false", CordonedBy: "r"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newNodesEnv(t, []*corev1.Node{tc.node}, []*corev1.Node{tc.node})
			rec, err := e.w.Cordon(t.Context(), "r", "a", nodestep.Record{}, tc.with)
			if err != nil {
				t.Fatalf("Cordon: %v", err)
			}
			if gets := e.actions("get"); len(gets) != 0 {
				t.Errorf("read the node from the API (%d gets); the cache's copy will do for a conditional write", len(gets))
			}
			patches := e.actions("patch")
			if got := len(patches) == 1; got != tc.wantPatch || len(patches) > 1 {
				t.Fatalf("%d patches; want patch=%v", len(patches), tc.wantPatch)
			}
			if tc.wantPatch {
				body := decodePatch(t, patches[0])
				if body.Metadata.ResourceVersion != "5" {
					t.Errorf("patch conditional on %q; want 5 (the copy read)", body.Metadata.ResourceVersion)
				}
				if gotSpec := body.Spec != nil && body.Spec.Unschedulable != nil && *body.Spec.Unschedulable; gotSpec != tc.wantSpec {
					t.Errorf("patch sets unschedulable: %v; want %v", gotSpec, tc.wantSpec)
				}
			}
			n := e.stored(t, "a")
			if !n.Spec.Unschedulable {
				t.Errorf("the node is schedulable after Cordon")
			}
			if !equalAnnotations(n.Annotations, tc.wantAnn) {
				t.Errorf("annotations = %v; want %v", n.Annotations, tc.wantAnn)
			}
			if rec.Step != tc.wantRecord.Step || rec.PriorUnschedulable != tc.wantRecord.PriorUnschedulable || rec.CordonedBy != tc.wantRecord.CordonedBy {
				t.Errorf("record = %+v; want %+v", rec, tc.wantRecord)
			}
		})
	}
}

func equalAnnotations(got, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

// TestCordonReadsTheAPIWhenNotCached: a node neither cached nor written by
// this process is read from the API, and the cordon is conditional on that.
func TestCordonReadsTheAPIWhenNotCached(t *testing.T) {
	e := newNodesEnv(t, []*corev1.Node{testNode("a", "9", false)}, nil)
	if _, err := e.w.Cordon(t.Context(), "r", "a", nodestep.Record{}, nil); err != nil {
		t.Fatalf("Cordon: %v", err)
	}
	if len(e.actions("get")) != 1 {
		t.Errorf("gets = %v; want one read from the API", e.actions("get"))
	}
	patches := e.actions("patch")
	if len(patches) != 1 || decodePatch(t, patches[0]).Metadata.ResourceVersion != "9" {
		t.Fatalf("patches = %v; want one conditional on 9", patches)
	}
	if n := e.stored(t, "a"); !n.Spec.Unschedulable || n.Annotations[model.AnnotationCordonedBy] != "r" {
		t.Errorf("node = %v %v; want cordoned by r", n.Spec.Unschedulable, n.Annotations)
	}
}

// TestCordonRacingAPersonsCordon: the cache is behind a person's cordon, so
// the first patch (conditional on the cached copy) gets a 409; the cache
// does not catch up in time (fake clock), so the retry reads the API and
// records the person's cordon as prior instead of claiming it.
func TestCordonRacingAPersonsCordon(t *testing.T) {
	e := newNodesEnv(t, []*corev1.Node{testNode("a", "6", true, "user/why", "disk")}, []*corev1.Node{testNode("a", "5", false)})
	rec, err := e.w.Cordon(t.Context(), "r", "a", nodestep.Record{}, nil)
	if err != nil {
		t.Fatalf("Cordon: %v", err)
	}
	var rvs []string
	for _, p := range e.actions("patch") {
		rvs = append(rvs, decodePatch(t, p).Metadata.ResourceVersion)
	}
	if strings.Join(rvs, ",") != "5,6" {
		t.Errorf("patches conditional on %v; want 5 (the cache), then 6 (the API)", rvs)
	}
	if len(e.actions("get")) != 1 {
		t.Errorf("gets = %d; want 1 (after the cache did not catch up)", len(e.actions("get")))
	}
	n := e.stored(t, "a")
	if n.Annotations[model.AnnotationPriorUnschedulable] != "true" || n.Annotations[model.AnnotationCordonedBy] != "" || n.Annotations["user/why"] != "disk" {
		t.Errorf("annotations = %v; want the person's cordon recorded as prior and their annotation kept", n.Annotations)
	}
	if rec.PriorUnschedulable != "true" || rec.CordonedBy != "" {
		t.Errorf("record = %+v; want prior true, not cordoned by r", rec)
	}
}

// TestNodeWriteErrors: Forbidden and NotFound end Cordon and Uncordon at
// once (no retry); 409s are retried ConflictBackoff.Steps times, then
// returned.
func TestNodeWriteErrors(t *testing.T) {
	fastConflicts(t)
	cordoned := testNode("a", "5", true, model.AnnotationPriorUnschedulable, "false", model.AnnotationCordonedBy, "r")
	type op func(e *nodesEnv, ctx context.Context) error
	cordon := func(e *nodesEnv, ctx context.Context) error {
		_, err := e.w.Cordon(ctx, "r", "a", nodestep.Record{}, nil)
		return err
	}
	uncordon := func(e *nodesEnv, ctx context.Context) error {
		_, err := e.w.Uncordon(ctx, "a", nodestep.Record{}, nil)
		return err
	}
	for _, tc := range []struct {
		name        string
		op          op
		node        *corev1.Node // nil: no such node
		verb        string       // the verb that fails
		fail        error
		wantErr     func(error) bool
		wantPatches int
	}{
		{name: "cordon forbidden", op: cordon, node: testNode("a", "5", false), verb: "patch", fail: apierrors.NewForbidden(nodesGR, "a", errors.New("rbac")), wantErr: apierrors.IsForbidden, wantPatches: 1},
		{name: "uncordon forbidden", op: uncordon, node: cordoned, verb: "patch", fail: apierrors.NewForbidden(nodesGR, "a", errors.New("rbac")), wantErr: apierrors.IsForbidden, wantPatches: 1},
		{name: "cordon of a missing node", op: cordon, wantErr: apierrors.IsNotFound},
		{name: "uncordon of a missing node", op: uncordon, wantErr: apierrors.IsNotFound},
		{name: "cordon conflicting every time", op: cordon, node: testNode("a", "5", false), verb: "patch", fail: apierrors.NewConflict(nodesGR, "a", errors.New("modified")), wantErr: apierrors.IsConflict, wantPatches: 4},
		{name: "uncordon conflicting every time", op: uncordon, node: cordoned, verb: "patch", fail: apierrors.NewConflict(nodesGR, "a", errors.New("modified")), wantErr: apierrors.IsConflict, wantPatches: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []*corev1.Node
			if tc.node != nil {
				nodes = append(nodes, tc.node)
			}
			e := newNodesEnv(t, nodes, nodes)
			if tc.fail != nil {
				failNodes(e.kube, tc.verb, tc.fail)
			}
			err := tc.op(e, t.Context())
			if !tc.wantErr(err) {
				t.Fatalf("err = %v; want the API's error", err)
			}
			if got := len(e.actions("patch")); got != tc.wantPatches {
				t.Errorf("%d patches; want %d", got, tc.wantPatches)
			}
			if tc.node != nil {
				if n := e.stored(t, "a"); n.ResourceVersion != tc.node.ResourceVersion {
					t.Errorf("the node was written (rv %s)", n.ResourceVersion)
				}
			}
		})
	}
}

// TestCordonContextEnds: when the request context ends while Cordon waits
// for the cache to show the write its patch conflicted with, Cordon gives up
// at once: no read from the API, no second patch, and the error says the
// context ended (not only the 409 it was retrying).
func TestCordonContextEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func(t *testing.T, e *nodesEnv) context.Context
	}{
		{
			name: "cancelled as the patch conflicts",
			ctx: func(t *testing.T, e *nodesEnv) context.Context {
				ctx, cancel := context.WithCancel(t.Context())
				e.kube.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					cancel()
					return false, nil, nil // the API answers (409)
				})
				return ctx
			},
		},
		{
			name: "deadline passed",
			ctx: func(t *testing.T, _ *nodesEnv) context.Context {
				ctx, cancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
				t.Cleanup(cancel)
				return ctx
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newNodesEnv(t, []*corev1.Node{testNode("a", "6", false)}, []*corev1.Node{testNode("a", "5", false)})
			// The clock stands still for the catch-up wait (only the context
			// can end it); should Cordon wait on regardless, it jumps an hour
			// after 20 readings, and the read and patch that follow fail the test.
			t0, readings := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), 0
			e.w.Now = func() time.Time {
				if readings++; readings > 20 {
					return t0.Add(time.Hour)
				}
				return t0
			}
			ctx := tc.ctx(t, e)
			_, err := e.w.Cordon(ctx, "r", "a", nodestep.Record{}, nil)
			if err == nil {
				t.Fatalf("Cordon succeeded after its context ended")
			}
			if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
				t.Errorf("Cordon = %v; want the context's end (%v)", err, ctx.Err())
			}
			if got := len(e.actions("patch")); got != 1 {
				t.Errorf("%d patches; want only the one that conflicted", got)
			}
			if got := len(e.actions("get")); got != 0 {
				t.Errorf("%d gets; want none once the context ended", got)
			}
			if n := e.stored(t, "a"); n.Spec.Unschedulable || n.ResourceVersion != "6" {
				t.Errorf("the node was written: %+v", n)
			}
		})
	}
}

// TestUncordon: the node is handed back from the API's copy (this process
// has not written it, so the cache could hide nodewise's cordon): made
// schedulable only if nodewise cordoned it and nobody asked to keep it
// cordoned, the bookkeeping removed either way, in one conditional patch.
func TestUncordon(t *testing.T) {
	for _, tc := range []struct {
		name      string
		node      *corev1.Node
		wantPatch bool
		wantClear bool   // the patch sets unschedulable false
		wantEvent string // an event mentioning this, or none
		wantUnsch bool
	}{
		{
			name:      "nodewise's cordon is lifted",
			node:      testNode("a", "6", true, model.AnnotationPriorUnschedulable, "false", model.AnnotationCordonedBy, "r"),
			wantPatch: true, wantClear: true,
		},
		{
			name:      "a node cordoned before stays cordoned",
			node:      testNode("a", "6", true, model.AnnotationPriorUnschedulable, "true"),
			wantPatch: true, wantUnsch: true,
		},
		{
			name:      "keep-cordoned: stays cordoned, with an event",
			node:      testNode("a", "6", true, model.AnnotationPriorUnschedulable, "false", model.AnnotationCordonedBy, "r", model.AnnotationKeepCordoned, "maintenance"),
			wantPatch: true, wantUnsch: true, wantEvent: `NodewiseLeftCordoned nodewise's uncordon left the node cordoned: nodewise.io/keep-cordoned="maintenance"`,
		},
		{
			name: "no cordon recorded: nothing to write",
			node: testNode("a", "6", false, model.AnnotationStep, "Done"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The cache still shows the node before nodewise's cordon.
			e := newNodesEnv(t, []*corev1.Node{tc.node}, []*corev1.Node{testNode("a", "5", false)})
			rec, err := e.w.Uncordon(t.Context(), "a", nodestep.Record{}, nil)
			if err != nil {
				t.Fatalf("Uncordon: %v", err)
			}
			if len(e.actions("get")) != 1 {
				t.Errorf("gets = %d; want the node read from the API", len(e.actions("get")))
			}
			patches := e.actions("patch")
			if (len(patches) == 1) != tc.wantPatch || len(patches) > 1 {
				t.Fatalf("%d patches; want patch=%v", len(patches), tc.wantPatch)
			}
			if tc.wantPatch {
				body := decodePatch(t, patches[0])
				if body.Metadata.ResourceVersion != "6" {
					t.Errorf("patch conditional on %q; want 6", body.Metadata.ResourceVersion)
				}
				cleared := body.Spec != nil && body.Spec.Unschedulable != nil && !*body.Spec.Unschedulable
				if cleared != tc.wantClear || (body.Spec != nil && !tc.wantClear) {
					t.Errorf("patch spec = %+v; want unschedulable cleared: %v", body.Spec, tc.wantClear)
				}
			}
			n := e.stored(t, "a")
			if n.Spec.Unschedulable != tc.wantUnsch {
				t.Errorf("unschedulable = %v; want %v", n.Spec.Unschedulable, tc.wantUnsch)
			}
			if _, ok := n.Annotations[model.AnnotationCordonedBy]; ok {
				t.Errorf("cordoned-by left: %v", n.Annotations)
			}
			if _, ok := n.Annotations[model.AnnotationPriorUnschedulable]; ok {
				t.Errorf("prior-unschedulable left: %v", n.Annotations)
			}
			if rec.CordonedBy != "" || rec.PriorUnschedulable != "" {
				t.Errorf("record = %+v; want the cordon bookkeeping gone", rec)
			}
			events := drainEvents(e.events)
			switch {
			case tc.wantEvent == "" && len(events) > 0:
				t.Errorf("events = %v; want none", events)
			case tc.wantEvent != "" && (len(events) != 1 || !strings.Contains(events[0], tc.wantEvent)):
				t.Errorf("events = %v; want %q", events, tc.wantEvent)
			}
		})
	}
}

// TestCordonThenUncordon: after this process's own cordon, Uncordon trusts
// the node that patch returned (no read), though the cache is still behind.
func TestCordonThenUncordon(t *testing.T) {
	e := newNodesEnv(t, []*corev1.Node{testNode("a", "5", false)}, []*corev1.Node{testNode("a", "5", false)})
	since := func(s string) map[string]*string {
		return map[string]*string{model.AnnotationStepSince: nodestep.Ptr(s)}
	}
	if _, err := e.w.Cordon(t.Context(), "r", "a", nodestep.Record{}, since("2026-12-01T10:00:00Z")); err != nil {
		t.Fatalf("Cordon: %v", err)
	}
	if _, err := e.w.Uncordon(t.Context(), "a", nodestep.Record{}, since("2026-12-01T10:05:00Z")); err != nil {
		t.Fatalf("Uncordon: %v", err)
	}
	if gets := e.actions("get"); len(gets) != 0 {
		t.Errorf("%d gets; want none (the cordon's answer is this process's own write)", len(gets))
	}
	var rvs []string
	for _, p := range e.actions("patch") {
		rvs = append(rvs, decodePatch(t, p).Metadata.ResourceVersion)
	}
	if strings.Join(rvs, ",") != "5,6" {
		t.Errorf("patches conditional on %v; want 5, then 6 (the cordon's answer)", rvs)
	}
	if n := e.stored(t, "a"); n.Spec.Unschedulable || n.Annotations[model.AnnotationCordonedBy] != "" {
		t.Errorf("node = unschedulable %v, %v; want handed back", n.Spec.Unschedulable, n.Annotations)
	}
}

// TestUncordonRacingKeepCordoned: a person asks to keep the node cordoned
// right after this process's cordon; the uncordon's patch (conditional on
// the cordon's answer) gets a 409, and the retry, reading the API once the
// cache does not catch up, leaves the node cordoned and says so.
func TestUncordonRacingKeepCordoned(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	e := newNodesEnv(t, []*corev1.Node{testNode("a", "5", false)}, []*corev1.Node{testNode("a", "5", false)})
	e.w.Log = zap.New(core)
	if _, err := e.w.Cordon(t.Context(), "r", "a", nodestep.Record{}, map[string]*string{model.AnnotationStepSince: nodestep.Ptr("2026-12-01T10:00:00Z")}); err != nil {
		t.Fatalf("Cordon: %v", err)
	}
	n := e.stored(t, "a")
	n.Annotations[model.AnnotationKeepCordoned] = "debugging"
	n.ResourceVersion = "7"
	if err := e.kube.Tracker().Update(nodesGVR, n, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.w.Uncordon(t.Context(), "a", nodestep.Record{}, nil); err != nil {
		t.Fatalf("Uncordon: %v", err)
	}
	var rvs []string
	for _, p := range e.actions("patch") {
		rvs = append(rvs, decodePatch(t, p).Metadata.ResourceVersion)
	}
	if strings.Join(rvs, ",") != "5,6,7" {
		t.Errorf("patches conditional on %v; want 5 (cordon), 6 (409), 7 (the API's copy)", rvs)
	}
	n = e.stored(t, "a")
	if !n.Spec.Unschedulable || n.Annotations[model.AnnotationKeepCordoned] != "debugging" || n.Annotations[model.AnnotationCordonedBy] != "" {
		t.Errorf("node = unschedulable %v, %v; want cordoned, keep-cordoned kept, bookkeeping gone", n.Spec.Unschedulable, n.Annotations)
	}
	if ev := drainEvents(e.events); len(ev) != 1 || !strings.Contains(ev[0], "NodewiseLeftCordoned") {
		t.Errorf("events = %v; want NodewiseLeftCordoned", ev)
	}
	if logs.FilterMessage("left cordoned").Len() != 1 {
		t.Errorf("logs = %v; want one \"left cordoned\"", logs.All())
	}
}
