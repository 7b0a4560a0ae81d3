package worker

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// waitBaseline is preflight's wait for the node's baseline window. A gate
// that reads the agents' history (Reads.History) already holds the part of the
// window its agent's current run covers: preflight waits only for the rest,
// counted from the oldest sample of that run (none for an agent that kept
// the whole window, all of it for a new agent, from the restart for one that
// restarted), checked again after each wait so an agent restarted meanwhile
// is waited for too. A gate that samples the agents from preflight on
// waits the whole window, to deadline; one that reads neither (the
// readiness gate) reads no baseline, so none is waited for.
func (l judgedLife) waitBaseline(ctx context.Context, p model.Policy, node string, deadline time.Time) error {
	switch r := l.gate.Reads(); {
	case !r.Samples && !r.History:
		return nil
	case !r.History:
		return observe.SleepUntil(ctx, deadline, l.now)
	}
	for {
		until := deadline
		if since := l.gate.CoveredSince(ctx, node); !since.IsZero() {
			until = since.Add(p.Baseline)
		}
		now := l.now()
		if !now.Before(until) {
			return nil
		}
		l.log.Info("waiting for the part of the baseline window the agent's history does not cover",
			zap.String("node", node), zap.Duration("wait", until.Sub(now).Round(time.Second)), zap.Duration("baseline", p.Baseline))
		if err := observe.SleepUntil(ctx, until, l.now); err != nil {
			return err
		}
	}
}

// baselineStart is when the node's baseline window starts, given the
// preflight's start (recorded) and the swap's: with a gate that reads the
// agents' history, the window is the spec's baseline that ended at the swap,
// or the time since the preflight when that is longer; else the time since
// the preflight, as waited.
func (l judgedLife) baselineStart(p model.Policy, preflight, swapStart time.Time) time.Time {
	if !l.gate.Reads().History || swapStart.IsZero() {
		return preflight
	}
	if from := swapStart.Add(-p.Baseline); preflight.IsZero() || from.Before(preflight) {
		return from
	}
	return preflight
}
