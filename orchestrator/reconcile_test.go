package orchestrator

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/fleet"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

var nodesGR = schema.GroupResource{Resource: "nodes"}

// TestReconcileDoesNotCompleteFromAStaleDaemonSetCache: a rollout applied
// right after its template changed can be planned before the DaemonSet cache
// has the change; the fleet then looks up to date. The pass reads the
// DaemonSets from the API before it completes and, finding the cache behind,
// writes nothing; once the cache has caught up it completes.
func TestReconcileDoesNotCompleteFromAStaleDaemonSetCache(t *testing.T) {
	e := newEnv(t, append(cluster(fixture.NewHash, "n1", "n2"), rollout("r", nil))...)
	ds, err := e.kube.AppsV1().DaemonSets(fixture.ZtunnelTarget.Namespace).Get(e.ctx, fixture.ZtunnelTarget.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.Generation++ // the template changed in the API; the cache has not seen it
	if _, err := e.kube.AppsV1().DaemonSets(ds.Namespace).Update(e.ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if got := e.stored("r"); got.Status.Phase == v1alpha1.PhaseCompleted {
		t.Fatalf("completed from a DaemonSet cache behind the API: %+v", got.Status)
	}
	ds.Status.ObservedGeneration = ds.Generation
	_ = e.dss.Update(ds) // the cache catches up (the controller observed it: settled)
	if _, err := e.kube.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(e.ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if got := e.stored("r"); got.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s once the cache caught up, want Completed", got.Status.Phase)
	}
}

// TestReconcileMarksUpToDateNodesDoneAndCompletes: a fleet already on the
// newest revisions completes without touching a node's schedulability: each
// node gets a Done record and status entry, the phase and conditions say
// Completed, no finalizer is taken, and a finished rollout is not planned
// again.
func TestReconcileMarksUpToDateNodesDoneAndCompletes(t *testing.T) {
	e := newEnv(t, append(cluster(fixture.NewHash, "n1", "n2"), rollout("r", nil))...)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	got := e.stored("r")
	if got.Status.Phase != v1alpha1.PhaseCompleted || got.Status.ObservedGeneration != 1 || got.Status.CompletionTime == nil {
		t.Fatalf("status %+v, want Completed at generation 1 with a completion time", got.Status)
	}
	for _, n := range []string{"n1", "n2"} {
		if ns := e.nodeStatus("r", n); ns.State != v1alpha1.NodeDone {
			t.Errorf("node %s: %s, want Done", n, ns.State)
		}
		if step := e.apiNode(n).Annotations[model.AnnotationStep]; step != string(v1alpha1.NodeDone) {
			t.Errorf("node %s record: step %q, want Done", n, step)
		}
		if e.apiNode(n).Spec.Unschedulable {
			t.Errorf("node %s cordoned", n)
		}
	}
	if got.Status.Counts.Done != 2 || got.Status.Counts.Total != 2 {
		t.Errorf("counts %+v, want 2 of 2 done", got.Status.Counts)
	}
	if c := condition(got.Status, "Complete"); c.Status != metav1.ConditionTrue {
		t.Errorf("Complete condition %+v, want True", c)
	}
	if c := condition(got.Status, "Valid"); c.Status != metav1.ConditionTrue {
		t.Errorf("Valid condition %+v, want True", c)
	}
	if len(got.Status.Targets) != 2 || got.Status.Targets[0].Revision != fixture.NewHash {
		t.Errorf("status targets %+v, want both at %s", got.Status.Targets, fixture.NewHash)
	}
	if slices.Contains(got.Finalizers, model.FinalizerReleaseNodes) {
		t.Error("a rollout that started no node took the finalizer")
	}
	if !hasEvent(e.emitted(), "Normal Completed") {
		t.Error("no Completed event")
	}
	if v := testutil.ToFloat64(e.ex.metrics.NodesByState.WithLabelValues("r", string(v1alpha1.NodeDone))); v != 2 {
		t.Errorf("nodes Done gauge %v, want 2", v)
	}

	// Finished at this generation: the next pass reads and writes nothing.
	calls := len(e.api.Calls)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if len(e.api.Calls) != calls {
		t.Errorf("a completed rollout was written again: %v", e.api.Calls[calls:])
	}
}

// TestReconcilePausedListsThePlanAndStartsNothing: a paused rollout records
// its plan (every node Pending, in order) and its phase, cordons nothing,
// takes no finalizer; a second identical pass writes nothing new, and a
// node added meanwhile is written behind (same phase).
func TestReconcilePausedListsThePlanAndStartsNothing(t *testing.T) {
	e := newEnv(t, append(cluster(fixture.OldHash, "n1", "n2"), rollout("r", func(nr *v1alpha1.NodeRollout) { nr.Spec.Paused = true }))...)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	got := e.stored("r")
	if got.Status.Phase != v1alpha1.PhasePaused {
		t.Fatalf("phase %s, want Paused", got.Status.Phase)
	}
	if len(got.Status.Nodes) != 2 || got.Status.Nodes[0].State != v1alpha1.NodePending || got.Status.Nodes[0].Zone != "zone-a" {
		t.Errorf("nodes %+v, want two Pending entries in zone-a", got.Status.Nodes)
	}
	if p := e.patched("nodes"); len(p) != 0 {
		t.Errorf("a paused rollout patched nodes %v", p)
	}
	if slices.Contains(got.Finalizers, model.FinalizerReleaseNodes) {
		t.Error("a paused rollout took the finalizer")
	}
	if !hasEvent(e.emitted(), "Normal Paused") {
		t.Error("no Paused event")
	}

	writes := e.count("updatestatus")
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if n := e.count("updatestatus"); n != writes {
		t.Errorf("an unchanged plan was written again (%d writes, was %d)", n, writes)
	}
	if ev := e.emitted(); len(ev) != 0 {
		t.Errorf("events without a phase change: %v", ev)
	}

	// A new node: same phase, so its entry is written behind.
	for _, o := range cluster(fixture.OldHash, "n3")[6:] {
		switch o := o.(type) {
		case *corev1.Node:
			_ = e.nodes.Add(o)
		case *corev1.Pod:
			_ = e.pods.Add(o)
		}
	}
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	cur, _ := e.ex.status.Current("r", "")
	if len(cur.Nodes) != 3 {
		t.Fatalf("status as queued has %d nodes, want 3", len(cur.Nodes))
	}
	// Flush the queue (a write somebody waits for carries it).
	if err := e.ex.status.Mutate(e.ctx, "r", func(*v1alpha1.NodeRolloutStatus) {}); err != nil {
		t.Fatal(err)
	}
	if ns := e.nodeStatus("r", "n3"); ns.State != v1alpha1.NodePending {
		t.Errorf("n3: %+v, want Pending", ns)
	}
}

// TestReconcileStartTakesTheFinalizerThenStartsOneNode: a rollout with work
// to do takes its finalizer before it acts, then starts one node
// (maxParallel 1) on a worker wired to the executor's own checks: the
// version-skew preflight (preflight.Skew) finds no istiod in the cluster,
// so the node fails before any cordon, is handed back, and the rollout
// halts with the preflight's reason. The ended worker frees its slot.
func TestReconcileStartTakesTheFinalizerThenStartsOneNode(t *testing.T) {
	e := newEnv(t, append(cluster(fixture.OldHash, "n1", "n2"), rollout("r", nil))...)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
		t.Fatalf("finalizers %v, want %s before any node starts", e.stored("r").Finalizers, model.FinalizerReleaseNodes)
	}
	e.ex.wg.Wait() // the worker ends on the failed preflight
	select {
	case <-e.ex.freed:
	default:
		t.Error("the ended worker did not free its slot")
	}
	got := e.stored("r")
	if got.Status.Phase != v1alpha1.PhaseHalted || !strings.Contains(got.Status.HaltReason, "node n1: preflight") {
		t.Errorf("status phase %s halt %q, want Halted by n1's preflight", got.Status.Phase, got.Status.HaltReason)
	}
	if got.Status.StartTime == nil {
		t.Error("no start time")
	}
	if ns := e.nodeStatus("r", "n1"); ns.State != v1alpha1.NodeFailed {
		t.Errorf("n1: %+v, want Failed", ns)
	}
	n1 := e.apiNode("n1")
	if n1.Annotations[model.AnnotationStep] != string(v1alpha1.NodeFailed) || n1.Annotations[model.AnnotationRolloutUID] != "uid-r" || n1.Spec.Unschedulable {
		t.Errorf("n1 annotations %v unschedulable %v, want a Failed record of uid-r, not cordoned", n1.Annotations, n1.Spec.Unschedulable)
	}
	if !slices.Equal(e.patched("nodes"), []string{"n1"}) {
		t.Errorf("patched nodes %v, want only n1 (maxParallel 1)", e.patched("nodes"))
	}
	// n1 carried MaintenanceInProgress from its slot to its end (handed back: none left).
	var status []string
	for _, a := range e.kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetSubresource() == "status" && a.GetResource().Resource == "nodes" {
			status = append(status, p.GetName()+": "+string(p.GetPatch()))
		}
	}
	if len(status) != 2 || !strings.Contains(status[0], `"type":"MaintenanceInProgress"`) || !strings.Contains(status[1], `"$patch":"delete"`) {
		t.Errorf("status patches of nodes %q, want n1's MaintenanceInProgress set, then removed", status)
	}
	for _, c := range e.apiNode("n1").Status.Conditions {
		if c.Type == corev1.NodeMaintenanceInProgress {
			t.Errorf("n1 handed back with %+v", c)
		}
	}
}

// TestReconcileStartWaitsForTheFinalizer: when the finalizer cannot be
// written (a conflict with a user's edit, RBAC) no node starts: the pass
// returns the API's error and the next one tries again.
func TestReconcileStartWaitsForTheFinalizer(t *testing.T) {
	for _, tc := range []struct {
		name string
		verb string
		err  error
		is   func(error) bool
	}{
		{"conflict", "patch", apierrors.NewConflict(schema.GroupResource{Resource: "noderollouts"}, "r", errors.New("stale")), apierrors.IsConflict},
		{"forbidden", "patch", apierrors.NewForbidden(schema.GroupResource{Resource: "noderollouts"}, "r", errors.New("RBAC")), apierrors.IsForbidden},
		{"gone", "get", apierrors.NewNotFound(schema.GroupResource{Resource: "noderollouts"}, "r"), apierrors.IsNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", nil))...)
			failOnce(e.api, tc.verb, 1, tc.err)
			err := e.pass("r")
			if !tc.is(err) {
				t.Fatalf("err %v, want the API's %v", err, tc.err)
			}
			if e.ex.claims.Holds("r") || len(e.patched("nodes")) != 0 {
				t.Error("a node started without the finalizer")
			}
			// The next pass takes it and starts the node.
			e.kube.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(nodesGR, "n1", errors.New("RBAC"))
			})
			if err := e.pass("r"); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
				t.Error("the second pass did not take the finalizer")
			}
		})
	}
}

// TestReconcileAbortedFinishes: an aborted rollout with nothing in flight is
// Aborted, with a completion time, and starts nothing.
func TestReconcileAbortedFinishes(t *testing.T) {
	e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", func(nr *v1alpha1.NodeRollout) { nr.Spec.Abort = true }))...)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	got := e.stored("r")
	if got.Status.Phase != v1alpha1.PhaseAborted || got.Status.CompletionTime == nil {
		t.Fatalf("status %+v, want Aborted with a completion time", got.Status)
	}
	if len(e.patched("nodes")) != 0 || e.ex.claims.Holds("r") {
		t.Error("an aborted rollout started a node")
	}
	if !hasEvent(e.emitted(), "Normal Aborted") {
		t.Error("no Aborted event")
	}
}

// TestReconcileAbortStopsTheConformanceJob: an abort while the rollout's
// conformance Job runs deletes that Job and records the run stopped.
func TestReconcileAbortStopsTheConformanceJob(t *testing.T) {
	e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", func(nr *v1alpha1.NodeRollout) {
		nr.Spec.Abort = true
		nr.Spec.Gates.Conformance = &v1alpha1.ConformanceGate{Namespace: "qa"}
		nr.Status.Conformance = &v1alpha1.ConformanceStatus{Step: "start", Attempt: 1, Job: "r-conformance-start-1", Namespace: "qa", Outcome: v1alpha1.ConformanceRunning}
	}))...)
	if _, err := e.kube.BatchV1().Jobs("qa").Create(e.ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "qa", Name: "r-conformance-start-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.BatchV1().Jobs("qa").Get(e.ctx, "r-conformance-start-1", metav1.GetOptions{}); err == nil {
		t.Error("the conformance Job outlived the abort")
	}
	if got := e.stored("r").Status; got.Phase != v1alpha1.PhaseAborted || got.Conformance == nil || got.Conformance.Outcome != v1alpha1.ConformanceFailed {
		t.Fatalf("status %s, conformance %+v: want Aborted, the run Failed", got.Phase, got.Conformance)
	}
}

// TestReconcileDeletedRolloutReleasesItsFinalizer: deleting a rollout is an
// abort; once nothing of it is in flight its finalizer goes (the others
// stay), with a Released event. While a node is in flight it stays.
func TestReconcileDeletedRolloutReleasesItsFinalizer(t *testing.T) {
	deleted := func(nr *v1alpha1.NodeRollout) {
		now := metav1.NewTime(t0)
		nr.DeletionTimestamp = &now
		nr.Finalizers = []string{"example.com/keep", model.FinalizerReleaseNodes}
		nr.Status.Phase = v1alpha1.PhaseProgressing
	}

	t.Run("nothing in flight", func(t *testing.T) {
		e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", deleted))...)
		if err := e.pass("r"); err != nil {
			t.Fatal(err)
		}
		got := e.stored("r")
		if !slices.Equal(got.Finalizers, []string{"example.com/keep"}) {
			t.Errorf("finalizers %v, want only example.com/keep", got.Finalizers)
		}
		if got.Status.Phase != v1alpha1.PhaseAborted {
			t.Errorf("phase %s, want Aborted", got.Status.Phase)
		}
		if !hasEvent(e.emitted(), "Normal Released") {
			t.Error("no Released event")
		}
	})

	t.Run("a node in flight", func(t *testing.T) {
		nr := rollout("r", deleted)
		objs := cluster(fixture.OldHash, "n1")
		nodeIn(objs, "n1").Annotations = recordOf(nr, v1alpha1.NodeDrain)
		e := newEnv(t, append(objs, nr)...)
		// A worker already drives n1: the pass resumes nothing more.
		e.ex.claims.StartWorker("r", "n1")
		if err := e.pass("r"); err != nil {
			t.Fatal(err)
		}
		got := e.stored("r")
		if !slices.Contains(got.Finalizers, model.FinalizerReleaseNodes) {
			t.Errorf("finalizers %v: released while n1 is in flight", got.Finalizers)
		}
		if got.Status.Phase != v1alpha1.PhaseProgressing {
			t.Errorf("status %+v, want Progressing while n1 is made safe", got.Status)
		}
	})

	t.Run("released once the worker ends", func(t *testing.T) {
		e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", deleted))...)
		e.ex.claims.StartWorker("r", "n1") // a worker of the rollout still runs
		if err := e.pass("r"); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
			t.Fatal("released while a worker of the rollout runs")
		}
		e.ex.claims.EndWorker("r", "n1")
		if err := e.pass("r"); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
			t.Error("not released once the worker ended")
		}
	})

	t.Run("removing refused", func(t *testing.T) {
		e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", deleted))...)
		failOnce(e.api, "patch", 1, apierrors.NewForbidden(schema.GroupResource{Resource: "noderollouts"}, "r", errors.New("RBAC")))
		if err := e.pass("r"); !apierrors.IsForbidden(err) {
			t.Fatalf("err %v, want Forbidden", err)
		}
		if !slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
			t.Error("finalizer gone though its removal was refused")
		}
	})
}

// TestReconcileInvalidRolloutIsPending: a spec the planner cannot act on
// (invalid fields, a target outside the Istio namespace, a target of unknown
// kind, another rollout on the same nodes) is recorded Pending, Valid=False
// with the reason, and starts nothing.
func TestReconcileInvalidRolloutIsPending(t *testing.T) {
	unknown := targetDS("node-exporter", "ne-uid", map[string]string{"app": "node-exporter"}, "quay.io/prometheus/node-exporter:v1")
	for _, tc := range []struct {
		name  string
		mut   func(*v1alpha1.NodeRollout)
		extra []*v1alpha1.NodeRollout
		want  string
	}{
		{"bad field", func(nr *v1alpha1.NodeRollout) { nr.Spec.MaxParallel = intstr.FromInt32(-1) }, nil, "spec.maxParallel"},
		{"other namespace", func(nr *v1alpha1.NodeRollout) {
			nr.Spec.Targets = []v1alpha1.TargetRef{{Namespace: "kube-system", Name: "ztunnel"}}
		}, nil, "not in the Istio namespace istio-system"},
		{"unknown kind", func(nr *v1alpha1.NodeRollout) {
			nr.Spec.Targets = []v1alpha1.TargetRef{{Namespace: istioNS, Name: "node-exporter"}}
		}, nil, "cannot tell what DaemonSet istio-system/node-exporter runs"},
		{"overlap", nil, []*v1alpha1.NodeRollout{rollout("older", func(nr *v1alpha1.NodeRollout) {
			nr.CreationTimestamp = metav1.NewTime(t0.Add(-2 * time.Hour))
		})}, "waiting for NodeRollout older"},
		{"target missing", func(nr *v1alpha1.NodeRollout) {
			nr.Spec.Targets = []v1alpha1.TargetRef{{Namespace: istioNS, Name: "gone", Kind: v1alpha1.TargetZtunnel}}
		}, nil, "DaemonSet istio-system/gone not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(cluster(fixture.OldHash, "n1"), unknown, rollout("r", tc.mut))
			for _, o := range tc.extra {
				objs = append(objs, o)
			}
			e := newEnv(t, objs...)
			if err := e.pass("r"); err != nil {
				t.Fatal(err)
			}
			got := e.stored("r")
			if got.Status.Phase != v1alpha1.PhasePending {
				t.Fatalf("phase %s, want Pending", got.Status.Phase)
			}
			if c := condition(got.Status, "Valid"); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, tc.want) {
				t.Errorf("Valid condition %+v, want False naming %q", c, tc.want)
			}
			if len(e.patched("nodes")) != 0 || e.ex.claims.Holds("r") || slices.Contains(got.Finalizers, model.FinalizerReleaseNodes) {
				t.Error("an invalid rollout acted")
			}
			if !hasEvent(e.emitted(), "Normal Pending") {
				t.Error("no Pending event")
			}
		})
	}
}

// TestReconcileDeletedInvalidRollout: an invalid rollout plans nothing, so
// its finalizer is released from the Pending path, but only once no node
// holds a record of it in flight.
func TestReconcileDeletedInvalidRollout(t *testing.T) {
	mut := func(nr *v1alpha1.NodeRollout) {
		now := metav1.NewTime(t0)
		nr.DeletionTimestamp = &now
		nr.Finalizers = []string{model.FinalizerReleaseNodes}
		nr.Spec.MaxParallel = intstr.FromInt32(-1)
	}
	for _, tc := range []struct {
		name     string
		step     v1alpha1.NodeState // n1's record of the rollout
		status   v1alpha1.NodeState // n2's status entry
		released bool
	}{
		{"nothing held", "", "", true},
		{"done nodes only", v1alpha1.NodeDone, v1alpha1.NodeDone, true},
		{"a record in flight", v1alpha1.NodeCordon, "", false},
		{"a status entry in flight", "", v1alpha1.NodeSoak, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nr := rollout("r", mut)
			if tc.status != "" {
				nr.Status.Nodes = []v1alpha1.NodeStatus{{Name: "n2", State: tc.status}}
			}
			objs := cluster(fixture.OldHash, "n1", "n2", "n3")
			if tc.step != "" {
				nodeIn(objs, "n1").Annotations = recordOf(nr, tc.step)
			}
			e := newEnv(t, append(objs, nr)...)
			if err := e.pass("r"); err != nil {
				t.Fatal(err)
			}
			got := e.stored("r")
			if released := !slices.Contains(got.Finalizers, model.FinalizerReleaseNodes); released != tc.released {
				t.Errorf("released %v, want %v", released, tc.released)
			}
			if got.Status.Phase != v1alpha1.PhasePending {
				t.Errorf("phase %s, want Pending", got.Status.Phase)
			}
		})
	}
}

// TestReconcileHaltAndResume: a rollout with a failed node halts (Warning
// event, Halted gauge, reason kept); `nodewise resume` retries the failed
// node from Pending, acknowledges the token and clears the halt.
func TestReconcileHaltAndResume(t *testing.T) {
	nr := rollout("r", func(nr *v1alpha1.NodeRollout) { nr.Spec.Paused = true })
	objs := cluster(fixture.OldHash, "n1", "n2")
	nodeIn(objs, "n1").Annotations = recordOf(nr, v1alpha1.NodeFailed)
	e := newEnv(t, append(objs, nr)...)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	got := e.stored("r")
	if got.Status.Phase != v1alpha1.PhaseHalted || got.Status.HaltReason != "node n1 failed" {
		t.Fatalf("status %+v, want Halted: node n1 failed", got.Status)
	}
	if c := condition(got.Status, "Halted"); c.Status != metav1.ConditionTrue {
		t.Errorf("Halted condition %+v, want True", c)
	}
	if !hasEvent(e.emitted(), "Warning Halted") {
		t.Error("no Warning Halted event")
	}
	if v := testutil.ToFloat64(e.ex.metrics.Halted.WithLabelValues("r")); v != 1 {
		t.Errorf("halted gauge %v, want 1", v)
	}

	// resume: a new token (a user's write: the status writer's copy is now
	// stale, so its next write conflicts once and re-reads).
	live := e.stored("r")
	live.Annotations = map[string]string{model.AnnotationResumeToken: "t1"}
	e.put(live)
	gets := e.count("get")
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if e.count("get") == gets {
		t.Error("the stale status was not re-read after the user's write")
	}
	got = e.stored("r")
	if got.Annotations[model.AnnotationAckedResumeToken] != "t1" {
		t.Errorf("annotations %v, want the token acknowledged", got.Annotations)
	}
	if got.Status.Phase != v1alpha1.PhaseProgressing || got.Status.HaltReason != "" {
		t.Errorf("status phase %s halt %q, want the halt cleared (Progressing)", got.Status.Phase, got.Status.HaltReason)
	}
	if step := e.apiNode("n1").Annotations[model.AnnotationStep]; step != string(v1alpha1.NodePending) {
		t.Errorf("n1 record step %q, want Pending (retried)", step)
	}
	if ns := e.nodeStatus("r", "n1"); ns.State != v1alpha1.NodePending || ns.Reason != "halt cleared by resume" {
		t.Errorf("n1 status %+v, want Pending: halt cleared by resume", ns)
	}
	if v := testutil.ToFloat64(e.ex.metrics.Halted.WithLabelValues("r")); v != 0 {
		t.Errorf("halted gauge %v, want 0", v)
	}
}

// TestReconcileResumeAckRefused: a refused acknowledgement of the resume
// token is the pass's error (the next pass acknowledges it again).
func TestReconcileResumeAckRefused(t *testing.T) {
	nr := rollout("r", func(nr *v1alpha1.NodeRollout) {
		nr.Spec.Paused = true
		nr.Annotations = map[string]string{model.AnnotationResumeToken: "t1"}
	})
	e := newEnv(t, append(cluster(fixture.OldHash, "n1"), nr)...)
	failOnce(e.api, "patch", 1, apierrors.NewForbidden(schema.GroupResource{Resource: "noderollouts"}, "r", errors.New("RBAC")))
	err := e.pass("r")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "acknowledging resume") {
		t.Fatalf("err %v, want a Forbidden acknowledging resume", err)
	}
	if e.stored("r").Annotations[model.AnnotationAckedResumeToken] != "" {
		t.Error("token acknowledged though the patch was refused")
	}
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if e.stored("r").Annotations[model.AnnotationAckedResumeToken] != "t1" {
		t.Error("the next pass did not acknowledge the token")
	}
}

// TestReconcileStatusWriteErrors: a status write that conflicts is re-read
// and retried (the pass succeeds); one the API refuses, or for a rollout
// deleted from under the cache, is the pass's error.
func TestReconcileStatusWriteErrors(t *testing.T) {
	paused := func(nr *v1alpha1.NodeRollout) { nr.Spec.Paused = true }
	t.Run("conflict is retried", func(t *testing.T) {
		e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", paused))...)
		failOnce(e.api, "updatestatus", 2, apierrors.NewConflict(schema.GroupResource{Resource: "noderollouts"}, "r", errors.New("stale")))
		if err := e.pass("r"); err != nil {
			t.Fatal(err)
		}
		if e.stored("r").Status.Phase != v1alpha1.PhasePaused {
			t.Errorf("phase %s, want Paused after the retries", e.stored("r").Status.Phase)
		}
		if n := e.count("updatestatus"); n != 3 {
			t.Errorf("%d status writes, want 3 (two conflicts, then the write)", n)
		}
	})
	t.Run("forbidden", func(t *testing.T) {
		e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", paused))...)
		failOnce(e.api, "updatestatus", 1, apierrors.NewForbidden(schema.GroupResource{Resource: "noderollouts"}, "r", errors.New("RBAC")))
		if err := e.pass("r"); !apierrors.IsForbidden(err) {
			t.Fatalf("err %v, want Forbidden", err)
		}
		if e.stored("r").Status.Phase != "" {
			t.Error("status written though the API refused it")
		}
	})
	t.Run("rollout gone", func(t *testing.T) {
		e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", paused))...)
		if err := e.api.Delete(context.Background(), "r", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := e.pass("r"); !apierrors.IsNotFound(err) {
			t.Fatalf("err %v, want NotFound", err)
		}
	})
	t.Run("context cancelled", func(t *testing.T) {
		e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", paused))...)
		block := make(chan struct{})
		defer close(block)
		e.api.Fail = func(verb, _ string) error {
			if verb == "get" {
				<-block // the API hangs
			}
			return nil
		}
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		obj, _, _ := e.store.GetByKey("r")
		if err := e.ex.reconcile(ctx, obj.(*v1alpha1.NodeRollout).DeepCopy()); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	})
}

// TestReconcileForgetsNodesDeletedInFlight: a node deleted while in flight
// has its status entry ended (Skipped, with the reason and a Warning
// event) and its gate released; the rollout is not Completed until then.
// While a worker still drives it, it is left to the worker.
func TestReconcileForgetsNodesDeletedInFlight(t *testing.T) {
	withGone := func(nr *v1alpha1.NodeRollout) {
		nr.Status.Nodes = []v1alpha1.NodeStatus{{Name: "gone", State: v1alpha1.NodeDrain}}
	}
	t.Run("forgotten", func(t *testing.T) {
		e := newEnv(t, append(cluster(fixture.NewHash, "n1"), rollout("r", withGone))...)
		g := &releaser{}
		e.ex.apply.gate = g
		if err := e.pass("r"); err != nil {
			t.Fatal(err)
		}
		ns := e.nodeStatus("r", "gone")
		if ns.State != v1alpha1.NodeSkipped || ns.Reason != "node deleted during its Drain step" || ns.FinishTime == nil {
			t.Errorf("gone: %+v, want Skipped: node deleted during its Drain step", ns)
		}
		if !slices.Equal(g.done, []string{"gone"}) {
			t.Errorf("gate released %v, want [gone]", g.done)
		}
		if !hasEvent(e.emitted(), "Warning NodeSkipped") {
			t.Error("no NodeSkipped event")
		}
		if p := e.stored("r").Status.Phase; p != v1alpha1.PhaseProgressing {
			t.Errorf("phase %s, want Progressing (ending the deleted node's status)", p)
		}
		// The next pass completes.
		if err := e.pass("r"); err != nil {
			t.Fatal(err)
		}
		if p := e.stored("r").Status.Phase; p != v1alpha1.PhaseCompleted {
			t.Errorf("phase %s, want Completed", p)
		}
	})
	t.Run("a worker still on it", func(t *testing.T) {
		e := newEnv(t, append(cluster(fixture.NewHash, "n1"), rollout("r", withGone))...)
		e.ex.claims.StartWorker("r", "gone")
		if err := e.pass("r"); err != nil {
			t.Fatal(err)
		}
		if ns := e.nodeStatus("r", "gone"); ns.State != v1alpha1.NodeDrain {
			t.Errorf("gone: %s, want Drain left to its worker", ns.State)
		}
	})
}

// releaser is a gate that records the nodes it is told are done.
type releaser struct {
	gate.Base
	done []string
}

func (g *releaser) Judge(context.Context, gate.GateInput) (health.Verdict, error) {
	return health.Verdict{}, nil
}
func (g *releaser) Done(node string) { g.done = append(g.done, node) }

// TestReconcileRollback: a rollback waits while the templates are still on
// the revision the rollout moved nodes to; once they are off it, a Done
// node already back on the restored revision is marked RolledBack, and the
// rollout is RolledBack.
func TestReconcileRollback(t *testing.T) {
	mut := func(nr *v1alpha1.NodeRollout) {
		nr.Spec.Rollback = true
		nr.Generation = 2
		nr.Status = v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseCompleted, ObservedGeneration: 1,
			Targets: []v1alpha1.TargetStatus{{Namespace: istioNS, Name: "istio-cni-node", Revision: fixture.NewHash}, {Namespace: istioNS, Name: "ztunnel", Revision: fixture.NewHash}},
			Nodes:   []v1alpha1.NodeStatus{{Name: "n1", State: v1alpha1.NodeDone}}}
	}
	e := newEnv(t, append(cluster(fixture.NewHash, "n1"), rollout("r", mut))...)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	got := e.stored("r")
	if got.Status.Phase != v1alpha1.PhaseRollingBack || got.Status.Targets[0].Revision != fixture.NewHash {
		t.Fatalf("status %+v, want RollingBack, waiting, with the targets' revision kept", got.Status)
	}

	// The previous chart is re-applied: its revision is the newest again
	// (3), and n1's pods are already back on it.
	for _, ds := range []string{"istio-cni-node", "ztunnel"} {
		obj, ok, _ := e.revs.GetByKey(istioNS + "/" + ds + "-" + fixture.OldHash)
		if !ok {
			t.Fatalf("no old revision of %s", ds)
		}
		r := obj.(*appsv1.ControllerRevision).DeepCopy()
		r.Revision = 3
		_ = e.revs.Update(r)
	}
	for _, p := range e.pods.List() {
		pod := p.(*corev1.Pod).DeepCopy()
		pod.Labels[model.LabelControllerRevisionHash] = fixture.OldHash
		_ = e.pods.Update(pod)
	}
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	got = e.stored("r")
	if got.Status.Phase != v1alpha1.PhaseRolledBack {
		t.Fatalf("phase %s (%s), want RolledBack", got.Status.Phase, condition(got.Status, "Complete").Reason)
	}
	if ns := e.nodeStatus("r", "n1"); ns.State != v1alpha1.NodeRolledBack {
		t.Errorf("n1: %s, want RolledBack", ns.State)
	}
	if step := e.apiNode("n1").Annotations[model.AnnotationStep]; step != string(v1alpha1.NodeRolledBack) {
		t.Errorf("n1 record %q, want RolledBack", step)
	}
}

// TestReconcileAllOldestFirst: every cached rollout is planned, oldest
// first, so of two on the same nodes the older goes on and the younger
// waits for it; an error in one does not stop the others.
func TestReconcileAllOldestFirst(t *testing.T) {
	paused := func(created time.Duration) func(*v1alpha1.NodeRollout) {
		return func(nr *v1alpha1.NodeRollout) {
			nr.Spec.Paused = true
			nr.CreationTimestamp = metav1.NewTime(t0.Add(created))
		}
	}
	e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("young", paused(-time.Minute)), rollout("old", paused(-time.Hour)), rollout("broken", func(nr *v1alpha1.NodeRollout) {
		paused(-2 * time.Hour)(nr)
		nr.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "none"}}
	}))...)
	e.api.Fail = func(verb, name string) error {
		if name == "broken" && verb == "get" {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "noderollouts"}, name, errors.New("RBAC"))
		}
		return nil
	}
	e.ex.reconcileAll(e.ctx)
	if p := e.stored("old").Status.Phase; p != v1alpha1.PhasePaused {
		t.Errorf("old: %s, want Paused", p)
	}
	young := e.stored("young").Status
	if young.Phase != v1alpha1.PhasePending || !strings.Contains(condition(young, "Valid").Message, "waiting for NodeRollout old") {
		t.Errorf("young: %s %q, want Pending waiting for old", young.Phase, condition(young, "Valid").Message)
	}
	var order []string
	for _, c := range e.api.Calls {
		if strings.HasPrefix(c, "get ") && !slices.Contains(order, c) {
			order = append(order, c)
		}
	}
	if !slices.Equal(order, []string{"get broken", "get old", "get young"}) {
		t.Errorf("first reads %v, want oldest first", order)
	}
}

// TestWritePhaseKeepsAHalt: a halt (a worker's, written after the pass
// read the status) is cleared only by resume, rollback or abort: a pass
// that planned Progressing leaves it, one that plans Pending (an invalid
// spec) replaces it.
func TestWritePhaseKeepsAHalt(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*v1alpha1.NodeRollout)
		d    planner.Decision
		want v1alpha1.RolloutPhase
	}{
		{"progressing", nil, planner.Decision{Phase: v1alpha1.PhaseProgressing, Reason: "wave 1"}, v1alpha1.PhaseHalted},
		{"resumed", func(nr *v1alpha1.NodeRollout) {
			nr.Annotations = map[string]string{model.AnnotationResumeToken: "t2", model.AnnotationAckedResumeToken: "t1"}
		}, planner.Decision{Phase: v1alpha1.PhaseProgressing}, v1alpha1.PhaseProgressing},
		{"aborted", func(nr *v1alpha1.NodeRollout) { nr.Spec.Abort = true }, planner.Decision{Phase: v1alpha1.PhaseAborted}, v1alpha1.PhaseAborted},
		{"rollback", func(nr *v1alpha1.NodeRollout) { nr.Spec.Rollback = true }, planner.Decision{Phase: v1alpha1.PhaseRollingBack}, v1alpha1.PhaseRollingBack},
		{"invalid", nil, planner.Decision{Phase: v1alpha1.PhasePending, Reason: "bad"}, v1alpha1.PhasePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nr := rollout("r", func(nr *v1alpha1.NodeRollout) {
				nr.Status = v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted, HaltReason: "node n1 failed", ObservedGeneration: 1}
				if tc.mut != nil {
					tc.mut(nr)
				}
			})
			e := newEnv(t, nr)
			if err := e.ex.apply.writePhase(e.ctx, e.stored("r"), &fleet.Pass{Decision: tc.d}, nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			got := e.stored("r").Status
			if got.Phase != tc.want {
				t.Errorf("phase %s, want %s", got.Phase, tc.want)
			}
			if (got.Phase == v1alpha1.PhaseHalted) != (got.HaltReason != "") {
				t.Errorf("halt reason %q with phase %s", got.HaltReason, got.Phase)
			}
		})
	}
}

// TestWritePhaseCatchesUpSettledRecords: entries behind their node's
// settled record (in flight, Pending, or missing) are brought to it, with
// the reason and a finish time; an entry that agrees is left as it was.
func TestWritePhaseCatchesUpSettledRecords(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	nr := rollout("r", func(nr *v1alpha1.NodeRollout) {
		nr.Status = v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseProgressing, ObservedGeneration: 1, Nodes: []v1alpha1.NodeStatus{
			{Name: "n1", State: v1alpha1.NodeSwapZtunnel, StateSince: &since},
			{Name: "n2", State: v1alpha1.NodePending},
			{Name: "n3", State: v1alpha1.NodeDone, StateSince: &since, FinishTime: &since, Reason: "as it was"},
		}}
	})
	e := newEnv(t, nr)
	d := planner.Decision{Phase: v1alpha1.PhaseProgressing, Reason: "wave 2", Order: []planner.PlannedNode{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}, {Name: "n4"}}}
	settled := map[string]v1alpha1.NodeState{"n1": v1alpha1.NodeDone, "n2": v1alpha1.NodeFailed, "n3": v1alpha1.NodeDone, "n4": v1alpha1.NodeSkipped}
	if err := e.ex.apply.writePhase(e.ctx, e.stored("r"), &fleet.Pass{Decision: d}, settled, nil, nil); err != nil {
		t.Fatal(err)
	}
	// The catch-up is written behind (the phase did not change): a write
	// that waits carries it.
	if err := e.ex.status.Mutate(e.ctx, "r", func(*v1alpha1.NodeRolloutStatus) {}); err != nil {
		t.Fatal(err)
	}
	got := map[string]v1alpha1.NodeStatus{}
	for _, ns := range e.stored("r").Status.Nodes {
		got[ns.Name] = ns
	}
	for _, n := range []string{"n1", "n2", "n4"} {
		ns := got[n]
		if ns.State != settled[n] || ns.FinishTime == nil || ns.StateSince == nil || ns.StateSince.Equal(&since) || !strings.Contains(ns.Reason, "caught up with the node's record") {
			t.Errorf("node %s: %+v, want caught up to %s", n, ns, settled[n])
		}
	}
	if n3 := got["n3"]; n3.Reason != "as it was" || !n3.StateSince.Equal(&since) {
		t.Errorf("node n3, already Done: %+v, want it left as it was", n3)
	}
	if c := e.stored("r").Status.Counts; c.Done != 2 || c.Failed != 1 || c.Skipped != 1 || c.InProgress != 0 || c.Pending != 0 {
		t.Errorf("counts %+v, want 2 done, 1 failed, 1 skipped", c)
	}
}

// TestNodeStateSeries: the per-node series (nodewise_rollout_node_state) is
// one per node in a step or Failed, follows each node's state, and drops a
// node once it is Done: a rollout has at most its parallelism plus its
// failures, whatever its size.
func TestNodeStateSeries(t *testing.T) {
	e := newEnv(t)
	want := func(when, exp string) {
		t.Helper()
		head := "# HELP nodewise_rollout_node_state 1 for each node of a NodeRollout in a step or Failed, by state (other nodes have no series).\n# TYPE nodewise_rollout_node_state gauge\n"
		if exp == "" {
			head = ""
		}
		if err := testutil.CollectAndCompare(e.ex.metrics.NodeState, strings.NewReader(head+exp)); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
	e.ex.apply.updateGauges("r", []v1alpha1.NodeStatus{{Name: "n1", State: v1alpha1.NodeSoak}, {Name: "n2", State: v1alpha1.NodePending}, {Name: "n3", State: v1alpha1.NodeDone}}, nil)
	e.ex.apply.updateGauges("other", []v1alpha1.NodeStatus{{Name: "n9", State: v1alpha1.NodeFailed}}, nil)
	want("n1 in Soak", `nodewise_rollout_node_state{node="n1",rollout="r",state="Soak"} 1
nodewise_rollout_node_state{node="n9",rollout="other",state="Failed"} 1
`)
	e.ex.apply.updateGauges("r", []v1alpha1.NodeStatus{{Name: "n1", State: v1alpha1.NodeFailed}, {Name: "n2", State: v1alpha1.NodeCordon}, {Name: "n3", State: v1alpha1.NodeDone}}, nil)
	want("n1 Failed, n2 in Cordon", `nodewise_rollout_node_state{node="n1",rollout="r",state="Failed"} 1
nodewise_rollout_node_state{node="n2",rollout="r",state="Cordon"} 1
nodewise_rollout_node_state{node="n9",rollout="other",state="Failed"} 1
`)
	e.ex.apply.updateGauges("r", []v1alpha1.NodeStatus{{Name: "n1", State: v1alpha1.NodeRolledBack}, {Name: "n2", State: v1alpha1.NodeDone}, {Name: "n3", State: v1alpha1.NodeDone}}, nil)
	e.ex.apply.updateGauges("other", []v1alpha1.NodeStatus{{Name: "n9", State: v1alpha1.NodeSkipped}}, nil)
	want("all settled", "")
}

// TestDeletedRolloutSeriesGo: once a NodeRollout is gone from the cache, the
// next pass deletes its per-rollout series (per-node state, nodes by state,
// halted); another rollout's stay.
func TestDeletedRolloutSeriesGo(t *testing.T) {
	e := newEnv(t)
	done := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "other", Generation: 1}}
	done.Status.Phase, done.Status.ObservedGeneration = v1alpha1.PhaseCompleted, 1
	e.put(done)
	e.ex.apply.updateGauges("r", []v1alpha1.NodeStatus{{Name: "n1", State: v1alpha1.NodeFailed}}, nil)
	e.ex.metrics.Halted.WithLabelValues("r").Set(1)
	e.ex.apply.updateGauges("other", []v1alpha1.NodeStatus{{Name: "n9", State: v1alpha1.NodeFailed}}, nil)
	e.ex.metrics.Halted.WithLabelValues("other").Set(0)
	series := func(rollout string) int {
		n := 0
		for _, c := range []prometheus.Collector{e.ex.metrics.NodeState, e.ex.metrics.NodesByState, e.ex.metrics.Halted} {
			ch := make(chan prometheus.Metric, 100)
			c.Collect(ch)
			close(ch)
			for m := range ch {
				var d dto.Metric
				_ = m.Write(&d)
				for _, l := range d.GetLabel() {
					if l.GetName() == "rollout" && l.GetValue() == rollout {
						n++
					}
				}
			}
		}
		return n
	}
	if series("r") != 16 || series("other") != 16 { // 1 node state + 14 states + halted
		t.Fatalf("before: %d series of r, %d of other, want 16 each", series("r"), series("other"))
	}
	e.ex.reconcileAll(e.ctx) // r is not in the cache: deleted
	if n := series("r"); n != 0 {
		t.Errorf("%d series of the deleted rollout r remain", n)
	}
	if n := series("other"); n != 16 {
		t.Errorf("%d series of rollout other, want its 16 kept", n)
	}
}
