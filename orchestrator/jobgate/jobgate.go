// Package jobgate is a NodeRollout's conformance gate (spec.gates.conformance):
// before the rollout's first node starts, and with when AfterCanary once its
// canary nodes are done, the user's Job runs (health/conformance) and no node
// starts until it has passed; a failed or timed-out Job halts the rollout.
package jobgate

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/conformance"
)

// Step is the point due before the next node starts, "" when none: start
// until a start run passed, then (with when AfterCanary) after-canary once
// every canary node is done (canariesDone) until that run passed. A
// standing policy's run n names its points r<n>-start and r<n>-after-canary,
// so each run is gated. It is pure.
func Step(nr *v1alpha1.NodeRollout, canariesDone bool) string {
	g := nr.Spec.Gates.Conformance
	if g == nil {
		return ""
	}
	prefix := ""
	if nr.Spec.Standing && len(nr.Status.Runs) > 0 {
		prefix = fmt.Sprintf("r%d-", nr.Status.Runs[0].Run)
	}
	start, after := prefix+conformance.StepStart, prefix+conformance.StepAfterCanary
	rec := nr.Status.Conformance
	passed := func(step string) bool {
		return rec != nil && rec.Step == step && rec.Outcome == v1alpha1.ConformancePassed
	}
	switch {
	case passed(after):
		return ""
	case rec != nil && rec.Step == after:
		return after // under way, or failed and resumed
	case !passed(start):
		return start
	case g.When == v1alpha1.ConformanceAfterCanary && canariesDone:
		return after
	}
	return ""
}

// Gate runs the conformance Jobs of NodeRollouts.
type Gate struct {
	Kube kubernetes.Interface
	// Mutate persists a change to a rollout's status, returning once written.
	Mutate func(ctx context.Context, name string, f func(*v1alpha1.NodeRolloutStatus)) error
	Now    func() time.Time
	Log    *zap.Logger
}

// Verdict is what the gate says of the nodes about to start: Hold (they
// wait, the reason) or Halt (the rollout halts, the reason); neither: they start.
type Verdict struct {
	Hold, Halt string
}

// Before takes one step of the run of point step for nr, whose nodes are
// about to start: the run is persisted in status.conformance before its Job
// is created (a restarted orchestrator finds that Job by the recorded
// name), then the Job is created and judged.
func (g Gate) Before(ctx context.Context, nr *v1alpha1.NodeRollout, step string) (Verdict, error) {
	spec := *nr.Spec.Gates.Conformance
	rec, begin := conformance.Begin(nr.Status.Conformance, nr.Name, spec.Namespace, step, g.Now())
	waiting := fmt.Sprintf("no node starts: waiting for conformance Job %s/%s (%s, attempt %d, timeout %s)", rec.Namespace, rec.Job, step, rec.Attempt, conformance.Timeout(spec))
	yes := true
	r := conformance.Runner{Kube: g.Kube, Gate: spec,
		Owner: metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeRollout", Name: nr.Name, UID: nr.UID, Controller: &yes},
		Env:   map[string]string{"NODEWISE_VERSION": nr.Spec.Version}}
	if begin {
		// Checked before the run is recorded: a template the API server (or
		// the namespace's PodSecurity level) refuses halts at once.
		refusal, err := r.Validate(ctx)
		if err != nil {
			return Verdict{}, err
		}
		if refusal != "" {
			rec.Outcome, rec.Message = v1alpha1.ConformanceFailed, cut(refusal)
		}
		if err := g.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) { s.Conformance = rec.DeepCopy() }); err != nil {
			return Verdict{}, fmt.Errorf("recording conformance run %s: %w", rec.Job, err)
		}
		if refusal != "" {
			return Verdict{Halt: refusal}, nil
		}
		return Verdict{Hold: waiting}, nil
	}
	if rec.Outcome == v1alpha1.ConformancePassed {
		return Verdict{}, nil
	}
	res, err := r.Check(ctx, rec, g.Now())
	if err != nil {
		return Verdict{}, err
	}
	if res.Outcome == v1alpha1.ConformanceRunning {
		return Verdict{Hold: waiting}, nil
	}
	return g.finish(ctx, nr, rec, res, r)
}

// finish records how the run ended: a pass lets the nodes start (the
// passed Job is deleted once that is written), a failure halts.
func (g Gate) finish(ctx context.Context, nr *v1alpha1.NodeRollout, rec v1alpha1.ConformanceStatus, res conformance.Result, r conformance.Runner) (Verdict, error) {
	msg := cut(res.Message)
	if err := g.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
		if s.Conformance != nil && s.Conformance.Job == rec.Job {
			s.Conformance.Outcome, s.Conformance.Message = res.Outcome, msg
		}
	}); err != nil {
		return Verdict{}, fmt.Errorf("recording conformance run %s: %w", rec.Job, err)
	}
	if res.Outcome == v1alpha1.ConformanceFailed {
		return Verdict{Halt: res.Message}, nil
	}
	if err := r.Remove(ctx, rec); err != nil {
		g.Log.Info("passed conformance Job left behind", zap.String("rollout", nr.Name), zap.Error(err)) // it goes with the rollout
	}
	return Verdict{}, nil
}

// Stop ends a run an abort finds in flight: recorded Failed first, then
// its Job (and pods) deleted, so the suite stops testing a version the
// rollout no longer moves to. Nothing when no run is in flight.
func (g Gate) Stop(ctx context.Context, nr *v1alpha1.NodeRollout) error {
	rec := nr.Status.Conformance
	if rec == nil || rec.Outcome != v1alpha1.ConformanceRunning {
		return nil
	}
	const msg = "stopped by the abort: its Job was deleted"
	if err := g.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
		if s.Conformance != nil && s.Conformance.Job == rec.Job {
			s.Conformance.Outcome, s.Conformance.Message = v1alpha1.ConformanceFailed, msg
		}
	}); err != nil {
		return fmt.Errorf("recording conformance run %s stopped: %w", rec.Job, err)
	}
	return conformance.Runner{Kube: g.Kube}.Remove(ctx, *rec)
}

// cut bounds a message to what status.conformance.message takes.
func cut(s string) string {
	if len(s) > 4096 {
		return s[:4096]
	}
	return s
}
