package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// TestStartRunsOneWorkerPerNode: Start drives the node in a goroutine the
// leader waits for (WG), once per node however often the planner asks; a
// worker that ends frees its slot and its claim, and a worker stopped by
// an error while the leader still leads says so (it is resumed later).
func TestStartRunsOneWorkerPerNode(t *testing.T) {
	r := newRig(t, passing(), &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
	core, logs := observer.New(zapcore.WarnLevel)
	r.Log = zap.New(core)
	var mu sync.Mutex
	freed := 0
	r.Freed = func(string) { mu.Lock(); freed++; mu.Unlock() }
	swapping := make(chan struct{}, 2)
	r.replace.during = func() { swapping <- struct{}{} }
	r.replace.hold = true

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r.Start(ctx, r.nr, r.p, node1)
	<-swapping // the worker is in its swap
	if !r.Claims.Working(rollout, node1) {
		t.Fatal("a running worker is not marked working")
	}
	r.Start(ctx, r.nr, r.p, node1) // the planner's next pass: already driven
	cancel()
	r.WG.Wait()
	if freed != 1 || r.Claims.Working(rollout, node1) {
		t.Errorf("freed %d slots, working %v; want one worker, ended and freed", freed, r.Claims.Working(rollout, node1))
	}
	if logs.Len() != 0 {
		t.Errorf("a worker stopped by the leader's end warned: %v", logs.All())
	}

	// Stopped by an API error, with the leader still leading.
	r.replace.hold, r.replace.during = false, nil
	r.replace.err = apierrors.NewForbidden(corev1.Resource("pods"), "istio-cni-node-old", errors.New("RBAC"))
	r.Start(t.Context(), r.nr, r.p, node1)
	r.WG.Wait()
	warned := logs.FilterMessage("node worker stopped; it is resumed on the next pass").All()
	if len(warned) != 1 || freed != 2 {
		t.Fatalf("warnings %v, freed %d: want the stop warned and the slot freed", logs.All(), freed)
	}
	if err, _ := warned[0].ContextMap()["error"].(string); err == "" {
		t.Errorf("the warning %v does not carry the error", warned[0].ContextMap())
	}
}

// TestRunNodeStopsQuietlyWhenTheNodeIsDeleted: a node deleted while its
// worker waits in a step stops the worker with nothing to report (the
// planner forgets the node); any other stop returns its error.
func TestRunNodeStopsQuietlyWhenTheNodeIsDeleted(t *testing.T) {
	r := newRig(t, passing(), &fixture.Clock{T: t0}, nil)
	r.resumeAt(v1alpha1.NodeSwapCNI, t0, nil)
	r.replace.hold = true
	_ = r.c.nodes.Delete(readyNode(node1))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := r.runNode(ctx, r.nr, r.p, node1); err != nil || ctx.Err() != nil {
		t.Fatalf("runNode: %v (context %v); want nil once the node is gone, before the context ends", err, ctx.Err())
	}
	if len(r.nodes.steps()) != 0 || r.status.status().Phase == v1alpha1.PhaseHalted {
		t.Errorf("writes %v, status %+v: want nothing written for a deleted node", r.nodes.steps(), r.status.status())
	}

	r = newRig(t, passing(), &fixture.Clock{T: t0}, nil)
	r.resumeAt(v1alpha1.NodeSwapCNI, t0, nil)
	r.replace.err = apierrors.NewForbidden(corev1.Resource("pods"), "istio-cni-node-old", errors.New("RBAC"))
	if err := r.runNode(t.Context(), r.nr, r.p, node1); !apierrors.IsForbidden(err) {
		t.Fatalf("runNode: %v, want the swap's Forbidden", err)
	}
}

// TestPersistState: the planner's decisions about a node (Done, RolledBack,
// Pending for a retry) are written as its record and status entry, from
// the node's newest record; a node leaving flight is released by the gate;
// a reason is written before PersistState returns.
func TestPersistState(t *testing.T) {
	for _, tc := range []struct {
		name     string
		st       v1alpha1.NodeState
		reason   string
		released bool
		waited   bool
	}{
		{"done", v1alpha1.NodeDone, "", true, false},
		{"rolled back", v1alpha1.NodeRolledBack, "", true, true},
		{"retried", v1alpha1.NodePending, "retry after a failure", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := passing()
			r := newRig(t, g, &fixture.Clock{T: t0}, nil)
			r.resumeAt(v1alpha1.NodeFailed, t0.Add(-time.Hour), nil)
			r.status.st.Nodes = []v1alpha1.NodeStatus{{Name: node1, State: v1alpha1.NodeFailed, Reason: "gate Fail"}}
			if err := r.PersistState(t.Context(), r.nr, node1, tc.st, tc.reason); err != nil {
				t.Fatal(err)
			}
			rec := nodestep.ParseRecord(r.nodes.node(node1).Annotations)
			if rec.Step != tc.st || !rec.StepSince.Equal(t0) || rec.Rollout != rollout {
				t.Errorf("record %+v, want %s written now by %s", rec, tc.st, rollout)
			}
			ns := r.status.node(node1)
			if ns.State != tc.st || ns.Reason != tc.reason || !ns.StateSince.Time.Equal(t0) {
				t.Errorf("status entry %+v, want %s %q since now", ns, tc.st, tc.reason)
			}
			if (len(g.released) == 1) != tc.released {
				t.Errorf("released %v, want released %v", g.released, tc.released)
			}
			if (r.status.waited > 0) != tc.waited {
				t.Errorf("waited status writes %d, behind %d; want waited %v", r.status.waited, r.status.behind, tc.waited)
			}
		})
	}

	r := newRig(t, passing(), &fixture.Clock{T: t0}, nil)
	r.nodes.fail = func(string, v1alpha1.NodeState) error { return apierrors.NewNotFound(corev1.Resource("nodes"), node1) }
	if err := r.PersistState(t.Context(), r.nr, node1, v1alpha1.NodeDone, ""); !apierrors.IsNotFound(err) {
		t.Errorf("PersistState on a deleted node: %v, want NotFound", err)
	}
}

// TestNodeRecordReadsOneWay: a worker starts from the planner's claim, the
// node's record when it is this rollout's, else the status this process
// wrote (or, before it wrote any, the rollout's), and only a record is
// resumed. Another rollout's record lends only the node's cordon and swap
// bookkeeping.
func TestNodeRecordReadsOneWay(t *testing.T) {
	for _, tc := range []struct {
		name       string
		setup      func(r *rig)
		want       v1alpha1.NodeState
		fromRecord bool
		cordonedBy string // the cordon bookkeeping the record keeps
	}{
		{"nothing", func(*rig) {}, v1alpha1.NodePending, false, ""},
		{"claimed", func(r *rig) { r.Claims.Claim(rollout, node1); r.resumeAt(v1alpha1.NodeSoak, t0, nil) }, nodestep.Claimed, false, ""},
		{"our record", func(r *rig) { r.resumeAt(v1alpha1.NodeSoak, t0, nil) }, v1alpha1.NodeSoak, true, ""},
		{"another rollout's record, our status", func(r *rig) {
			r.resumeAt(v1alpha1.NodeSoak, t0, func(rec *nodestep.Record) { rec.RolloutUID, rec.CordonedBy = "other-uid", "other" })
			r.status.st.Nodes = []v1alpha1.NodeStatus{{Name: node1, State: v1alpha1.NodeFailed}}
		}, v1alpha1.NodeFailed, false, "other"},
		{"status not written yet", func(r *rig) {
			r.status.unknown = true
			r.nr.Status.Nodes = []v1alpha1.NodeStatus{{Name: node1, State: v1alpha1.NodeSkipped}}
		}, v1alpha1.NodeSkipped, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, passing(), &fixture.Clock{T: t0}, nil)
			tc.setup(r)
			rec, st, fromRecord := r.nodeRecord(r.nr, node1)
			if st != tc.want || fromRecord != tc.fromRecord {
				t.Errorf("nodeRecord = %s (from record %v), want %s (%v)", st, fromRecord, tc.want, tc.fromRecord)
			}
			if ((rec.Step != "") != tc.fromRecord && st != nodestep.Claimed) || rec.CordonedBy != tc.cordonedBy {
				t.Errorf("record %+v: want a step only from our record, cordoned by %q", rec, tc.cordonedBy)
			}
		})
	}
}

// TestAWorkerForASettledNodeFreesNoSlot: the planner resumed a node from a
// view behind its record, which says Done (its worker ended between the
// pass's views and its actions). The worker acts on nothing and ends, and
// it frees no slot: the worker that settled the node freed it, and a
// second wake-up would start one more full pass for nothing.
func TestAWorkerForASettledNodeFreesNoSlot(t *testing.T) {
	r := newRig(t, passing(), &fixture.Clock{T: t0}, nil)
	core, logs := observer.New(zapcore.InfoLevel)
	r.Log = zap.New(core)
	freed := 0
	r.Freed = func(string) { freed++ }
	r.resumeAt(v1alpha1.NodeDone, t0, nil)
	r.Start(t.Context(), r.nr, r.p, node1)
	r.WG.Wait()
	if freed != 0 || r.Claims.Working(rollout, node1) {
		t.Fatalf("freed %d slots, working %v: want the worker ended, no slot freed", freed, r.Claims.Working(rollout, node1))
	}
	if len(r.nodes.steps()) != 0 {
		t.Fatalf("the worker wrote steps %v for a settled node", r.nodes.steps())
	}
	if got := logs.FilterMessage("nothing to resume: the node's record has settled").Len(); got != 1 || logs.Len() != 1 {
		t.Fatalf("logs %v: want the one line saying the node had settled", logs.All())
	}
}
