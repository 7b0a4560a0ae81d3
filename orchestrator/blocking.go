package orchestrator

import (
	"context"
	"fmt"

	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// blockingPods maps each node a pod matching spec.blocking.podSelector runs
// on to the reason, from the pod cache (every namespace).
func (e *executor) blockingPods(b model.Blocking) (map[string]string, error) {
	if b.Pods == nil {
		return nil, nil
	}
	pods, err := e.pods.List(b.Pods)
	if err != nil {
		return nil, fmt.Errorf("listing pods for spec.blocking.podSelector: %w", err)
	}
	return planner.BlockingPods(pods, b.Pods), nil
}

// alertsBlock reads spec.blocking.alerts through the gate's Prometheus
// client: why they hold every start, "" when they do not (none set, or none
// firing). A read that fails holds them (fail closed).
func (e *executor) alertsBlock(ctx context.Context, b model.Blocking) string {
	if len(b.Alerts) == 0 {
		return ""
	}
	raw, err := e.gate.FiringAlerts(ctx, b.Address) // gate.ErrNoPrometheus: the gate reads none
	firing := make([]planner.FiringAlert, 0, len(raw))
	for _, ls := range raw {
		firing = append(firing, ls)
	}
	return planner.AlertsBlock(b, firing, err)
}
