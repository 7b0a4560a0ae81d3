package revisions

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/conformance"
)

// conformanceGate is spec.gates.conformance, or nil.
func conformanceGate(spec v1alpha1.RevisionMigrationSpec) *v1alpha1.ConformanceGate {
	if spec.Gates == nil {
		return nil
	}
	return spec.Gates.Conformance
}

// conformanceRunner runs rm's conformance Jobs, owned by rm, with the
// migration's revisions and tag in their environment.
func (c *Controller) conformanceRunner(rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, g v1alpha1.ConformanceGate) conformance.Runner {
	yes := true
	return conformance.Runner{Kube: c.cfg.Kube, Gate: g,
		Owner: metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RevisionMigration", Name: rm.Name, UID: rm.UID, Controller: &yes},
		Env:   map[string]string{"NODEWISE_FROM": spec.From, "NODEWISE_REVISION": spec.To, "NODEWISE_TAG": spec.Tag}}
}

// conformance runs spec.gates.conformance's Job before wave starts (before
// the first wave, and with when EveryWave before each later one), and says
// whether the wave may start. The run is persisted before its Job is
// created; a failed or timed-out run halts the migration with the Job's
// name and its last log lines, nothing of the wave moved.
func (c *Controller) conformance(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, wave int32) (bool, time.Duration, error) {
	g := conformanceGate(spec)
	if g == nil || (wave > 0 && g.When != v1alpha1.ConformanceEveryWave) {
		return true, 0, nil
	}
	st := &rm.Status
	name := st.Waves[wave].Name
	rec, begin := conformance.Begin(st.Conformance, rm.Name, g.Namespace, conformance.StepBeforeWave(wave), c.cfg.Now())
	running := fmt.Sprintf("wave %s waits for conformance Job %s/%s (attempt %d, timeout %s)", name, rec.Namespace, rec.Job, rec.Attempt, conformance.Timeout(*g))
	if begin {
		st.Conformance = &rec
		return false, c.cfg.Interval, c.setPhase(ctx, rm, v1alpha1.MigrationGating, running)
	}
	if rec.Outcome == v1alpha1.ConformancePassed {
		return true, 0, nil
	}
	r := c.conformanceRunner(rm, spec, *g)
	res, err := r.Check(ctx, rec, c.cfg.Now())
	if err != nil {
		return false, 0, err
	}
	switch res.Outcome {
	case v1alpha1.ConformancePassed:
		st.Conformance.Outcome, st.Conformance.Message = res.Outcome, res.Message
		if err := c.writeStatus(ctx, rm); err != nil {
			return false, 0, err
		}
		if err := r.Remove(ctx, rec); err != nil {
			// The Job goes with the migration at the latest.
			c.cfg.Log.Info("passed conformance Job left behind", zap.String("migration", rm.Name), zap.Error(err))
		}
		return true, 0, nil
	case v1alpha1.ConformanceFailed:
		st.Conformance.Outcome, st.Conformance.Message = res.Outcome, cut(res.Message, 4096)
		return false, 0, c.setPhase(ctx, rm, v1alpha1.MigrationHalted, fmt.Sprintf("wave %s not started: %s", name, res.Message))
	}
	if st.Phase == v1alpha1.MigrationGating && st.Reason == running {
		return false, c.cfg.Interval, nil
	}
	return false, c.cfg.Interval, c.setPhase(ctx, rm, v1alpha1.MigrationGating, running)
}

// cut shortens s to at most n bytes.
func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
