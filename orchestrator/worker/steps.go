package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// preflightChecks is preflight without the wait: observations only (the
// node, the skew unless a fresh pre-check passed it, the gate's first
// sample), so they may run while the Preflight record is being written.
func (w *Worker) preflightChecks(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string) error {
	n, err := w.Nodes.Get(node)
	if apierrors.IsNotFound(err) {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: node no longer exists")
	}
	if err != nil {
		return fmt.Errorf("reading node %s: %w", node, err)
	}
	if !model.NodeReady(n) {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: node is not Ready")
	}
	// A pass pre-checked while the nodes before it soaked stands (the
	// template and spec it saw are part of the key); else check now.
	if !w.Prechecks.passed(w.precheckKey(nr, p, node), w.Now()) {
		if err := w.Skew.Check(ctx, p, node); err != nil {
			return err
		}
	}
	return w.life().prepare(ctx, nr, p, node)
}

// judge runs the gate on the node's record; an error fails closed. It
// returns the verdict's summary and the judge's judgement, for the next
// record (Done or Failed) to persist.
func (w *Worker) judge(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record) (*health.Verdict, error) {
	life := w.life()
	in := life.input(nr, p, node, rec)
	// A gate that holds the node (Inconclusive rounds) waits in Judge: the
	// user's abort or delete, the node leaving the selector, or an edit of
	// spec.gates must reach it there, not only between steps.
	gctx, stop := w.whileGateStands(ctx, nr, node)
	v, err := w.Gate.Judge(gctx, in)
	stop()
	if cause := context.Cause(gctx); ctx.Err() == nil && (errors.Is(cause, errGateLeft) || errors.Is(cause, errGatesEdited)) {
		return nil, cause
	}
	return life.verdict(ctx, p, node, in.SoakStart, v, err)
}

// errGateLeft and errGatesEdited end a gate's wait early (whileGateStands):
// the worker decides again, which makes the node safe (abortedStep), or
// judges it again under the edited spec.gates (the rounds so far are
// persisted: Previous carries them on).
var (
	errGateLeft    = errors.New("the node's steps must stop short of its gate")
	errGatesEdited = errors.New("spec.gates was edited")
)

// whileGateStands is ctx, also cancelled once the node must leave (leaving:
// abort, deletion, the selector) with errGateLeft, or once the live
// spec.gates differs from nr's with errGatesEdited, read from the cache
// every observe.IdleCheck.
func (w *Worker) whileGateStands(ctx context.Context, nr *v1alpha1.NodeRollout, node string) (context.Context, func()) {
	return observe.CancelWhen(ctx, observe.IdleCheck, func() error {
		if w.Leaving(nr, node) != "" {
			return errGateLeft
		}
		if live := w.latest(nr.Name); live != nil && live.UID == nr.UID && !sameGates(live.Spec.Gates, nr.Spec.Gates) {
			return errGatesEdited
		}
		return nil
	})
}

// sameGates compares two gate specs as the API holds them (their JSON: a
// Duration keeps what was written, which reflection cannot compare).
func sameGates(a, b v1alpha1.GatesSpec) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// withLiveGates is nr and p with spec.gates as the cache holds it now.
func (w *Worker) withLiveGates(nr *v1alpha1.NodeRollout, p model.Policy) (*v1alpha1.NodeRollout, model.Policy) {
	live := w.latest(nr.Name)
	if live == nil || live.UID != nr.UID {
		return nr, p
	}
	cp := *nr
	cp.Spec.Gates = *live.Spec.Gates.DeepCopy()
	p.NoControlGroup = cp.Spec.Gates.ControlGroup == v1alpha1.ControlGroupDisabled
	return &cp, p
}
