package worker

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// EnrollmentPoll is how often the soak's enrollment watchdog asks the node's
// agent once its bound has passed.
const EnrollmentPoll = 5 * time.Second

// soak waits out the node's soak, to deadline, watching it two ways.
//
// Under a gate that reads the agents' enrollment (Reads.Enrollment) it is
// the enrollment watchdog: a new ztunnel's readiness probe says nothing of
// every pod's listeners, nor istio-cni's of every pod's redirection, so
// once spec.enrollmentTimeout has passed since the soak began (the new pods
// Ready, counted from the persisted start: a restart never stretches it)
// every pod enrolled before the swap must be enrolled, checked then and
// every EnrollmentPoll until the soak ends. The first check that finds one
// not enrolled fails the node at once, naming the pod and the failed check
// (gate_failed), before the soak's end. A check the agent cannot answer is
// no evidence: the gate judges (and fails closed) at the soak's end.
//
// Under a gate that looks during the soak (gate.Looker: the judge's
// sequential method) it looks every health.LookEvery from the soak's start,
// and a look that finds a regression conclusive fails the node at once, so
// a faulty build stops harming the node's pods within seconds rather than
// after the soak. A look never passes a node: that waits for the soak's end.
func (l judgedLife) soak(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record, deadline time.Time) (carried, error) {
	var res carried
	if err := l.keepSoakStart(ctx, nr, p, node, rec); err != nil {
		return res, err
	}
	since := rec.SoakSince
	if since.IsZero() {
		since = rec.StepSince
	}
	var check, look time.Time // zero: not watched that way
	if l.gate.Reads().Enrollment && p.EnrollmentTimeout > 0 && since.Add(p.EnrollmentTimeout).Before(deadline) {
		check = since.Add(p.EnrollmentTimeout)
	}
	looker, _ := l.gate.(gate.Looker)
	if looker != nil {
		look = health.NextLook(since, l.now())
	}
	var preflight time.Time
	if ns, ok := statusEntry(l.status, nr, node); ok && ns.StartTime != nil {
		preflight = ns.StartTime.Time
	}
	swapStart := rec.SwapSince
	if swapStart.IsZero() {
		swapStart = preflight
	}
	baselineStart := l.baselineStart(p, preflight, swapStart)
	for {
		next := deadline
		for _, t := range []time.Time{check, look} {
			if !t.IsZero() && t.Before(next) {
				next = t
			}
		}
		if err := l.sleepUntil(ctx, next); err != nil {
			return res, err
		}
		if next.Equal(deadline) {
			return res, nil
		}
		if !check.IsZero() && !next.Before(check) {
			// The node's persisted baseline record, read at each check: a
			// successor's judge takes the enrollment before the swap from it.
			ns, _ := statusEntry(l.status, nr, node)
			before, cur, err := l.gate.Enrollment(ctx, node, baselineStart, swapStart, ns.Baseline)
			if err != nil {
				l.log.Info("enrollment watchdog: no check this time", zap.String("node", node), zap.Error(err))
			} else if failures := health.WatchEnrollment(before, cur); len(failures) > 0 {
				l.log.Warn("enrollment watchdog failed the node", zap.String("node", node), zap.Strings("pods", failures))
				v := health.WatchdogVerdict(before, cur, failures, l.now().Sub(since), p.EnrollmentTimeout, l.now())
				return carried{verdict: &v}, nodestep.Halt(nodestep.HaltGateFailed, "gate %s", v.Line())
			}
			if check = l.now().Add(EnrollmentPoll); !check.Before(deadline) {
				check = time.Time{}
			}
		}
		if !look.IsZero() && !next.Before(look) {
			in := l.input(nr, p, node, rec)
			v, failed, err := looker.Look(ctx, in, l.now().Sub(since))
			if err != nil {
				l.log.Info("look during the soak: no decision", zap.String("node", node), zap.Error(err))
			} else if failed {
				l.log.Warn("sequential judgement failed the node during its soak", zap.String("node", node), zap.String("verdict", v.Line()))
				return carried{verdict: &v}, nodestep.Halt(nodestep.HaltGateFailed, "gate %s", v.Line())
			}
			if look = health.NextLook(since, l.now()); !look.Before(deadline) {
				look = time.Time{}
			}
		}
	}
}

// sleepUntil waits until t on the worker's clock (Sleep, when a test sets it).
func (l judgedLife) sleepUntil(ctx context.Context, t time.Time) error {
	if l.sleep != nil {
		return l.sleep(ctx, t)
	}
	return observe.SleepUntil(ctx, t, l.now)
}
