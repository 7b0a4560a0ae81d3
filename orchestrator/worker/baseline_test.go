package worker

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// historian is a gate whose samples of the node cover since a time, which
// a test moves (an agent restarted during the wait).
type historian struct {
	gate.Base
	since []time.Time // returned in turn, the last one repeated
	asked int
}

func (h *historian) Reads() gate.Reads { return gate.Reads{History: true} }

func (h *historian) Judge(context.Context, gate.GateInput) (health.Verdict, error) {
	return health.Verdict{}, nil
}

func (h *historian) CoveredSince(context.Context, string) time.Time {
	s := h.since[min(h.asked, len(h.since)-1)]
	h.asked++
	return s
}

// TestPreflightWaitsOnlyForTheUncoveredBaseline: a history covering the
// whole baseline costs no wait; one covering part of it waits for the
// rest, from the oldest sample of the agent's run, not for the whole
// window; an agent that restarts during the wait is waited for again; a
// gate that samples without history waits the whole window; a gate that
// reads no baseline waits for none.
func TestPreflightWaitsOnlyForTheUncoveredBaseline(t *testing.T) {
	const baseline = 400 * time.Millisecond
	ctx := context.Background()
	exec := func(g gate.Gate) judgedLife { return judgedLife{now: time.Now, log: zap.NewNop(), gate: g} }
	p := model.Policy{Baseline: baseline}
	farDeadline := time.Now().Add(time.Hour) // the record's StepSince + baseline: never reached here

	full := &historian{since: []time.Time{time.Now().Add(-time.Hour)}}
	if err := exec(full).waitBaseline(ctx, p, "w1", farDeadline); err != nil || full.asked != 1 {
		t.Fatalf("covered baseline: %v, asked %d times (want once, no wait)", err, full.asked)
	}

	start := time.Now()
	part := &historian{since: []time.Time{start.Add(-baseline / 2)}}
	if err := exec(part).waitBaseline(ctx, p, "w1", farDeadline); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.Before(start.Add(baseline/2)) || part.asked != 2 {
		t.Errorf("half covered: returned after %s, asked %d times; want at least %s, then asked again", now.Sub(start), part.asked, baseline/2)
	}

	start = time.Now()
	restart := start.Add(baseline / 4)
	again := &historian{since: []time.Time{start.Add(-baseline / 2), restart}}
	if err := exec(again).waitBaseline(ctx, p, "w1", farDeadline); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.Before(restart.Add(baseline)) || again.asked != 3 {
		t.Errorf("restarted during the wait: returned %s after the restart, asked %d times; want the whole baseline since the restart", now.Sub(restart), again.asked)
	}

	start = time.Now()
	sampler := &judgeGate{}
	if err := exec(sampler).waitBaseline(ctx, p, "w1", start.Add(baseline/4)); err != nil || time.Now().Before(start.Add(baseline/4)) {
		t.Errorf("samples without history: %v, returned before the deadline", err)
	}

	// A gate that reads no baseline (readiness only) waits for none: with
	// a context already cancelled, any wait would return its error.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	readiness := gate.GateFunc(func(context.Context, gate.GateInput) (health.Verdict, error) { return health.Verdict{}, nil })
	if err := exec(readiness).waitBaseline(cancelled, p, "w1", farDeadline); err != nil {
		t.Errorf("readiness gate: %v; want no wait", err)
	}
}
