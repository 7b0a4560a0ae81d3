package nodecond

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// Writer writes nodewise's lifecycle conditions on nodes through Kube
// (nodes/status patches by condition type, each conditional on the
// resourceVersion it decided from). The workers call it as a node goes out
// (Out), starts and ends its drain (Draining) and is handed back
// (Settled); every full pass sweeps the fleet (Sweep), so a condition a
// crashed leader left is cleared by its successor once no record says the
// node is out.
type Writer struct {
	Kube  kubernetes.Interface
	Nodes NodeSource
	// Live says a NodeRollout of that name and UID exists (a record of a
	// deleted one has no node out).
	Live func(name string, uid types.UID) bool
	Now  func() time.Time
	Log  *zap.Logger
	// WG counts the writes Out and Settled make in the background.
	WG *sync.WaitGroup
}

// NodeSource is the node writer's view of the nodes (write.Nodes): the
// newest copy this process knows (its own patches before the cache shows
// them), told of each status patch so its conditional writes read on from it.
type NodeSource interface {
	Newest(node string) *corev1.Node
	Remember(node, rv string, out *corev1.Node)
}

// Out sets MaintenanceInProgress on a node rollout has just taken a slot
// for, in the background, beside the node's preflight; wait returns once
// it is written (or its failure logged): the worker waits for it before
// anything past the preflight acts on the node.
func (w *Writer) Out(ctx context.Context, rollout, node string) (wait func()) {
	done := make(chan struct{})
	w.background(func() {
		defer close(done)
		w.logged(node, w.Sync(ctx, node, func(*corev1.Node) Want { return Want{Maintenance: InFlight(rollout), DrainAsIs: true} }))
	})
	return func() { <-done }
}

// Draining sets (on) or clears nodewise's DrainInProgress around the
// evictions of rollout's Drain step; the node stays out meanwhile.
func (w *Writer) Draining(ctx context.Context, rollout, node string, on bool) error {
	want := Want{Maintenance: InFlight(rollout)}
	if on {
		want.Drain = Draining(rollout)
	}
	return w.Sync(ctx, node, func(*corev1.Node) Want { return want })
}

// Settled brings the node's conditions to its final record: none once it
// is handed back, MaintenanceInProgress (Halted) while a halt leaves it
// cordoned. It writes in the background, off the slot's path: the next
// node starts without waiting for it.
func (w *Writer) Settled(ctx context.Context, node string) {
	w.background(func() { w.logged(node, w.Sync(ctx, node, w.fromRecord)) })
}

// background runs f in a goroutine counted in WG (the leader waits for
// it as for the workers).
func (w *Writer) background(f func()) {
	w.WG.Add(1)
	go func() {
		defer w.WG.Done()
		f()
	}()
}

// logged logs a failed write. The conditions tell other tools; they gate
// nothing of nodewise's (its budget reads the records), so the node's
// steps go on, and the next full pass writes them again (Sweep).
func (w *Writer) logged(node string, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		w.Log.Warn("writing the node's lifecycle conditions", zap.String("node", node), zap.Error(err))
	}
}

func (w *Writer) fromRecord(n *corev1.Node) Want {
	return FromRecord(nodestep.ParseRecord(n.Annotations), n.Spec.Unschedulable, w.Live)
}

// Sweep brings each node's conditions to what its record says
// (FromRecord), a node claimed by a rollout with no record yet (claims:
// the rollout by node) keeping MaintenanceInProgress. Only nodes that
// carry a condition of nodewise's, are claimed, or whose record is in
// flight or Failed are looked at; only a difference is written.
func (w *Writer) Sweep(ctx context.Context, nodes []*corev1.Node, claims map[string]string) {
	for _, cached := range nodes {
		n := w.Nodes.Newest(cached.Name)
		if n == nil {
			continue
		}
		claim := claims[n.Name]
		if st := v1alpha1.NodeState(n.Annotations[model.AnnotationStep]); claim == "" && !model.InFlight(st) && st != v1alpha1.NodeFailed && !carries(n) {
			continue
		}
		want := func(n *corev1.Node) Want {
			if wt := w.fromRecord(n); wt.Maintenance != nil || claim == "" {
				return wt
			}
			return Want{Maintenance: InFlight(claim), DrainAsIs: true}
		}
		if Diff(n.Status.Conditions, want(n), w.Now()).Empty() {
			continue
		}
		w.logged(n.Name, w.Sync(ctx, n.Name, want))
	}
}

// carries says n has a lifecycle condition nodewise wrote.
func carries(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if locks.Nodewise(c) {
			return true
		}
	}
	return false
}

// Sync writes the difference between the node's conditions and want of
// it, deciding from the newest copy this process knows, then (after a
// conflict) from the API's.
func (w *Writer) Sync(ctx context.Context, node string, want func(*corev1.Node) Want) error {
	for attempt := range 5 {
		var n *corev1.Node
		if attempt == 0 {
			n = w.Nodes.Newest(node)
		}
		if n == nil {
			var err error
			if n, err = w.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return nil
			} else if err != nil {
				return fmt.Errorf("reading node %s: %w", node, err)
			}
		}
		ch := Diff(n.Status.Conditions, want(n), w.Now())
		if ch.Empty() {
			return nil
		}
		data, err := ch.Patch(n.ResourceVersion)
		if err != nil {
			return fmt.Errorf("encoding the conditions of node %s: %w", node, err)
		}
		out, err := w.Kube.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, data, metav1.PatchOptions{FieldManager: model.FieldManager}, "status")
		switch {
		case apierrors.IsConflict(err):
			continue
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("writing the lifecycle conditions of node %s: %w", node, err)
		}
		w.Nodes.Remember(node, n.ResourceVersion, out)
		for _, c := range ch.Set {
			w.Log.Info("node condition set", zap.String("node", node), zap.String("type", string(c.Type)), zap.String("reason", c.Reason))
		}
		for _, t := range ch.Remove {
			w.Log.Info("node condition removed", zap.String("node", node), zap.String("type", string(t)))
		}
		return nil
	}
	return fmt.Errorf("writing the lifecycle conditions of node %s: conflicts, 5 times in a row", node)
}
