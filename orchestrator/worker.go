package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// stepError ends a node's steps with a halt (or a skip) and a reason.
type stepError struct {
	halt   string // a HaltXxx metric label
	reason string
	skip   bool // skip the node instead of halting the rollout
}

func (s *stepError) Error() string { return s.reason }

func halt(kind, format string, args ...any) error {
	return &stepError{halt: kind, reason: fmt.Sprintf(format, args...)}
}

// swapState names the step that swaps target i.
// Its kind is filled in by typeTargets (targetkind.go), never guessed from the name.
func swapState(t v1alpha1.TargetRef) v1alpha1.NodeState {
	switch t.Kind {
	case v1alpha1.TargetCNI:
		return v1alpha1.NodeSwapCNI
	case v1alpha1.TargetZtunnel:
		return v1alpha1.NodeSwapZtunnel
	}
	return v1alpha1.NodeState("Swap/" + t.Namespace + "/" + t.Name)
}

// steps is the per-node sequence for a policy.
func steps(p Policy) []v1alpha1.NodeState {
	s := []v1alpha1.NodeState{v1alpha1.NodePreflight, v1alpha1.NodeCordon, v1alpha1.NodeDrain}
	for _, t := range p.Targets {
		s = append(s, swapState(t))
	}
	return append(s, v1alpha1.NodeWaitReady, v1alpha1.NodeUncordon, v1alpha1.NodeSoak, v1alpha1.NodeGate)
}

func (e *executor) startWorker(ctx context.Context, nr *v1alpha1.NodeRollout, p Policy, node string) {
	key := nr.Name + "/" + node
	e.mu.Lock()
	if e.workers[key] {
		e.mu.Unlock()
		return
	}
	e.workers[key] = true
	e.mu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() {
			e.mu.Lock()
			delete(e.workers, key)
			e.mu.Unlock()
			e.poke()
		}()
		if err := e.runNode(ctx, nr, p, node); err != nil && ctx.Err() == nil {
			e.o.log.Warn("node worker stopped; it is resumed on the next pass", zap.String("node", node), zap.Error(err))
		}
	}()
}

// runNode drives one node from its persisted step to the end. Every step is
// idempotent: after a crash it is simply run again.
func (e *executor) runNode(ctx context.Context, nr *v1alpha1.NodeRollout, p Policy, node string) error {
	seq := steps(p)
	cur, since := e.persistedStep(nr, node)
	if cur == claimed {
		cur = v1alpha1.NodePending // the loop persists Preflight first
	}
	idx := -1
	for i, s := range seq {
		if s == cur {
			idx = i
		}
	}
	if cur == v1alpha1.NodePending {
		idx = 0
	}
	abortSafe := false
	if cur == v1alpha1.NodeAbortCleanup {
		idx, abortSafe = indexOf(seq, v1alpha1.NodeUncordon), true
	}
	if idx < 0 {
		return fmt.Errorf("node %s: unknown persisted step %q", node, cur)
	}
	for ; idx < len(seq); idx++ {
		st := seq[idx]
		if st != cur && noop(p, st) {
			continue // nothing to act on, nothing to persist
		}
		if st == v1alpha1.NodeUncordon && st != cur && !abortSafe && p.Soak == 0 {
			if live := e.latest(nr.Name); live == nil || !live.Spec.Abort {
				return e.uncordonGated(ctx, nr, p, node)
			}
		}
		acted := false
		var checked chan error
		if st == v1alpha1.NodePreflight && st != cur {
			// Preflight only observes: its checks run while its record is
			// written; nothing acts (cordons) before both are done.
			checked = make(chan error, 1)
			go func() { checked <- e.preflightChecks(ctx, p, node) }()
		}
		if st != cur && !unrecorded(p, st) { // persist before acting
			var write func(map[string]*string) error
			var stamps []string
			switch {
			case st == v1alpha1.NodeCordon:
				write = func(ann map[string]*string) error { return e.cordon(ctx, nr, node, ann) }
				stamps = []string{AnnotationSwapSince}
				if next := cordonsWith(p, seq, idx); next >= 0 {
					// Nothing observes the API between the cordon and the
					// first swap (no drain): one patch cordons and records
					// that swap (and the pod it deletes), which then acts.
					idx, st = next, seq[next]
				}
			case st == v1alpha1.NodeUncordon:
				write = func(ann map[string]*string) error { return e.uncordon(ctx, nr, node, ann) }
			case st == v1alpha1.NodeSoak:
				stamps = []string{AnnotationSoakSince}
			}
			var err error
			if since, err = e.persistStepWith(ctx, nr, node, st, "", e.stepAnnotations(p, node, st), write, stamps...); err != nil {
				return err
			}
			cur, acted = st, st == v1alpha1.NodeCordon || st == v1alpha1.NodeUncordon
		}
		if live := e.latest(nr.Name); live != nil && live.Spec.Abort && !abortSafe && st != v1alpha1.NodeUncordon {
			// Make the node safe: a started swap finishes, anything before it is skipped.
			if idx <= indexOf(seq, v1alpha1.NodeDrain) || idx > indexOf(seq, v1alpha1.NodeWaitReady) {
				abortSafe = true
				if _, err := e.persistStep(ctx, nr, node, v1alpha1.NodeAbortCleanup, "aborted", nil); err != nil {
					return err
				}
				idx = indexOf(seq, v1alpha1.NodeUncordon) - 1
				cur = v1alpha1.NodeAbortCleanup
				continue
			}
		}
		var err error
		switch {
		case acted: // cordon and uncordon acted in the same patch as their record
		case checked != nil:
			if err = <-checked; err == nil {
				err = sleepUntil(ctx, since.Add(p.Baseline), e.o.cfg.Now)
			}
		default:
			err = e.doStep(ctx, nr, p, node, st, since)
		}
		var se *stepError
		switch {
		case errors.As(err, &se):
			return e.finishBad(ctx, nr, p, node, se)
		case err != nil:
			return err
		}
		if abortSafe && st == v1alpha1.NodeUncordon {
			break
		}
	}
	final := v1alpha1.NodeDone
	reason := ""
	switch {
	case p.Rollback:
		final = v1alpha1.NodeRolledBack
	case abortSafe:
		final, reason = v1alpha1.NodePending, "aborted before the swap"
		if e.upToDate(p, node) {
			final, reason = v1alpha1.NodeDone, "aborted after the swap; not gated"
		}
	}
	_, err := e.persistStep(ctx, nr, node, final, reason, e.swappedCleanup(p))
	return err
}

func (e *executor) doStep(ctx context.Context, nr *v1alpha1.NodeRollout, p Policy, node string, st v1alpha1.NodeState, since time.Time) error {
	switch st {
	case v1alpha1.NodePreflight:
		return e.preflight(ctx, p, node, since)
	case v1alpha1.NodeCordon:
		return e.cordon(ctx, nr, node, nil)
	case v1alpha1.NodeDrain:
		return e.drain(ctx, nr, p, node, since)
	case v1alpha1.NodeWaitReady:
		for _, ref := range p.Targets {
			if err := e.waitReady(ctx, ref, node, since, p.SwapTimeout); err != nil {
				return err
			}
		}
		return nil
	case v1alpha1.NodeUncordon:
		return e.uncordon(ctx, nr, node, nil)
	case v1alpha1.NodeSoak:
		return sleepUntil(ctx, since.Add(p.Soak), e.o.cfg.Now)
	case v1alpha1.NodeGate:
		return e.judge(ctx, nr, p, node)
	}
	for _, ref := range p.Targets {
		if swapState(ref) == st {
			return e.swap(ctx, nr, p, ref, node, since)
		}
	}
	return fmt.Errorf("no action for step %s", st)
}

// finishBad ends a node that failed: skip-node uncordons and skips it, a halt
// records the reason on the node, in status and in Events.
func (e *executor) finishBad(ctx context.Context, nr *v1alpha1.NodeRollout, p Policy, node string, se *stepError) error {
	if se.skip {
		if err := e.uncordon(ctx, nr, node, nil); err != nil {
			return err
		}
		if _, err := e.persistStep(ctx, nr, node, v1alpha1.NodeSkipped, se.reason, e.swappedCleanup(p)); err != nil {
			return err
		}
		e.recorder.Eventf(nr, corev1.EventTypeWarning, "NodeSkipped", "node %s skipped: %s", node, se.reason)
		return nil
	}
	if se.halt == HaltPDBBlocked || se.halt == HaltPreflightFailed {
		// Nothing was swapped: the node is safe to hand back.
		if err := e.uncordon(ctx, nr, node, nil); err != nil {
			return err
		}
	}
	reason := fmt.Sprintf("node %s: %s", node, se.reason)
	e.carryNext(nr.Name, node, func(c *carried) { c.halt = reason })
	if _, err := e.persistStep(ctx, nr, node, v1alpha1.NodeFailed, se.reason, nil); err != nil {
		return err
	}
	e.o.metrics.Halts.WithLabelValues(se.halt).Inc()
	e.recorder.Eventf(nr, corev1.EventTypeWarning, "Halted", "rollout halted: %s", reason)
	e.recorder.Eventf(&corev1.ObjectReference{Kind: "Node", Name: node, UID: e.nodeUID(node), APIVersion: "v1"}, corev1.EventTypeWarning, "NodewiseHalted", "NodeRollout %s halted on this node: %s", nr.Name, se.reason)
	e.o.log.Warn("rollout halted", zap.String("rollout", nr.Name), zap.String("node", node), zap.String("reason", se.reason))
	return nil
}

func (e *executor) persistedStep(nr *v1alpha1.NodeRollout, node string) (v1alpha1.NodeState, time.Time) {
	if m, ok := e.marked(nr.Name, node); ok {
		return m.state, m.since
	}
	n, err := e.nodes.Get(node)
	if err == nil && n.Annotations[AnnotationRolloutUID] == string(nr.UID) {
		return v1alpha1.NodeState(n.Annotations[AnnotationStep]), parseTime(n.Annotations[AnnotationStepSince])
	}
	return v1alpha1.NodePending, time.Time{}
}

func (e *executor) latest(name string) *v1alpha1.NodeRollout {
	obj, ok, err := e.rolloutStore.GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	return obj.(*v1alpha1.NodeRollout)
}

func (e *executor) nodeUID(node string) types.UID {
	if n, err := e.nodes.Get(node); err == nil {
		return n.UID
	}
	return ""
}

// stepAnnotations are written with a step: before a swap, the UID of the old
// pod it is about to delete (a record for people and for the resume log).
func (e *executor) stepAnnotations(p Policy, node string, st v1alpha1.NodeState) map[string]*string {
	for _, ref := range p.Targets {
		if swapState(ref) != st {
			continue
		}
		tv, err := e.target(ref)
		if err != nil || !tv.Found {
			return nil
		}
		live, _, err := e.targetPods(tv, node)
		if err != nil {
			return nil
		}
		for _, pod := range live {
			if pod.Labels[LabelControllerRevisionHash] != tv.NewestHash {
				return map[string]*string{AnnotationSwappedPrefix + ref.Name: ptr(string(pod.UID))}
			}
		}
	}
	return nil
}

func (e *executor) swappedCleanup(p Policy) map[string]*string {
	m := map[string]*string{}
	for _, t := range p.Targets {
		m[AnnotationSwappedPrefix+t.Name] = nil
	}
	return m
}

// uncordonGated ends a node that has no soak: the gate judges right before
// the uncordon (which cannot change what it reads: readiness, the agent's
// counters), and a pass is recorded (Done with the verdict, or RolledBack)
// in the uncordon's own conditional patch, one write instead of two. A fail
// goes the usual way: the Uncordon record with the uncordon, then the halt.
func (e *executor) uncordonGated(ctx context.Context, nr *v1alpha1.NodeRollout, p Policy, node string) error {
	uncordon := func(ann map[string]*string) error { return e.uncordon(ctx, nr, node, ann) }
	err := e.judge(ctx, nr, p, node)
	var se *stepError
	switch {
	case errors.As(err, &se):
		if _, err := e.persistStepWith(ctx, nr, node, v1alpha1.NodeUncordon, "", nil, uncordon); err != nil {
			return err
		}
		return e.finishBad(ctx, nr, p, node, se)
	case err != nil:
		return err
	}
	final := v1alpha1.NodeDone
	if p.Rollback {
		final = v1alpha1.NodeRolledBack
	}
	_, err = e.persistStepWith(ctx, nr, node, final, "", e.swappedCleanup(p), uncordon)
	return err
}

// unrecorded steps only observe (wait for Ready, judge, preflight checks
// with no baseline window to wait out): they get no record of their own. A
// successor repeats the observation from the record before it (none, the
// last swap, or the soak), and the next step's record (Cordon, Uncordon, Done
// or Failed with the verdict) says it passed. Preflight with a baseline is
// recorded: the baseline window counts from its record, across a restart.
func unrecorded(p Policy, st v1alpha1.NodeState) bool {
	return st == v1alpha1.NodeWaitReady || st == v1alpha1.NodeGate || (st == v1alpha1.NodePreflight && p.Baseline == 0)
}

// cordonsWith is the index of the step whose record the cordon's patch
// carries instead of its own (the first swap, when every step between them
// is a noop: no drain), or -1.
func cordonsWith(p Policy, seq []v1alpha1.NodeState, cordon int) int {
	for i := cordon + 1; i < len(seq); i++ {
		switch {
		case noop(p, seq[i]):
			continue
		case seq[i] == v1alpha1.NodeSwapCNI || seq[i] == v1alpha1.NodeSwapZtunnel || strings.HasPrefix(string(seq[i]), "Swap/"):
			return i
		}
		return -1
	}
	return -1
}

// noop steps do nothing under this policy: no drain, or a zero soak.
func noop(p Policy, st v1alpha1.NodeState) bool {
	return (st == v1alpha1.NodeDrain && p.Drain == v1alpha1.DrainNever) || (st == v1alpha1.NodeSoak && p.Soak == 0)
}

func indexOf(seq []v1alpha1.NodeState, s v1alpha1.NodeState) int {
	for i, x := range seq {
		if x == s {
			return i
		}
	}
	return -1
}

func sleepUntil(ctx context.Context, t time.Time, now func() time.Time) error {
	d := t.Sub(now())
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
