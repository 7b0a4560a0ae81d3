package revisions

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

func (c *Controller) reconcile(ctx context.Context, rm *v1alpha1.RevisionMigration) error {
	spec := Defaulted(rm.Spec)
	defer c.observePhases(rm)
	switch rm.Status.Phase {
	case "", v1alpha1.MigrationPending:
		return c.start(ctx, rm, spec)
	case v1alpha1.MigrationSucceeded, v1alpha1.MigrationAborted, v1alpha1.MigrationRefused:
		return nil
	case v1alpha1.MigrationHalted:
		if !spec.Abort {
			return nil
		}
		return c.setPhase(ctx, rm, v1alpha1.MigrationAborting, "abort requested")
	case v1alpha1.MigrationProgressing, v1alpha1.MigrationGating:
		if spec.Abort {
			return c.setPhase(ctx, rm, v1alpha1.MigrationAborting, "abort requested")
		}
		return c.progress(ctx, rm, spec)
	case v1alpha1.MigrationAborting:
		return c.abort(ctx, rm, spec)
	}
	return nil
}

// writeStatus persists rm.Status with rm's resourceVersion (a conflict fails
// the reconcile, which retries from a fresh read) and adopts the result.
func (c *Controller) writeStatus(ctx context.Context, rm *v1alpha1.RevisionMigration) error {
	rm.Status.ObservedGeneration = rm.Generation
	out, err := c.cfg.Migrations.UpdateStatus(ctx, rm, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("writing status of %s: %w", rm.Name, err)
	}
	*rm = *out
	return nil
}

func (c *Controller) setPhase(ctx context.Context, rm *v1alpha1.RevisionMigration, p v1alpha1.MigrationPhase, reason string) error {
	c.cfg.Log.Info("migration phase", zap.String("migration", rm.Name), zap.String("phase", string(p)), zap.String("reason", reason))
	changed := rm.Status.Phase != p
	rm.Status.Phase, rm.Status.Reason = p, reason
	meta.SetStatusCondition(&rm.Status.Conditions, completeCondition(p, reason, rm.Generation))
	if err := c.writeStatus(ctx, rm); err != nil {
		return err
	}
	if c.cfg.Events != nil && changed {
		typ := corev1.EventTypeNormal
		switch p {
		case v1alpha1.MigrationHalted, v1alpha1.MigrationRefused, v1alpha1.MigrationAborting:
			typ = corev1.EventTypeWarning
		}
		c.cfg.Events.Event(rm, typ, string(p), reason)
	}
	return nil
}

// ConditionComplete is True once a migration succeeded, so that
// `kubectl wait --for=condition=Complete revisionmigration/NAME` works; its
// reason is the phase.
const ConditionComplete = "Complete"

func completeCondition(p v1alpha1.MigrationPhase, reason string, gen int64) metav1.Condition {
	st := metav1.ConditionFalse
	if p == v1alpha1.MigrationSucceeded {
		st = metav1.ConditionTrue
	}
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	return metav1.Condition{Type: ConditionComplete, Status: st, Reason: string(p), Message: reason, ObservedGeneration: gen}
}

func (c *Controller) refuse(ctx context.Context, rm *v1alpha1.RevisionMigration, reason string) error {
	return c.setPhase(ctx, rm, v1alpha1.MigrationRefused, reason)
}

// target is where a namespace is headed: the revision and its version.
type target struct {
	rev     string
	version skew.Version
}

// target observes where a revision's proxies are headed: its istiod version.
func (c *Controller) target(ctx context.Context, rev string) (target, error) {
	revs, err := inventory.Revisions(ctx, c.cfg.Kube, c.cfg.Inventory, nil)
	if err != nil {
		return target{}, err
	}
	for _, r := range revs {
		if r.Name != rev {
			continue
		}
		v, err := skew.ParseVersion(r.Version)
		if err != nil {
			return target{}, fmt.Errorf("revision %s: %w", rev, err)
		}
		return target{rev: rev, version: v}, nil
	}
	return target{}, fmt.Errorf("revision %s is no longer installed", rev)
}

// progress drives the current wave: retag, stamp, restart, wait, gate.
func (c *Controller) progress(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec) error {
	st := &rm.Status
	if int(st.CurrentWave) >= len(st.Waves) {
		return c.setPhase(ctx, rm, v1alpha1.MigrationSucceeded, fmt.Sprintf("all %d namespaces on %s", len(st.Namespaces), spec.To))
	}
	to, err := c.target(ctx, spec.To)
	if err != nil {
		return err
	}
	wave := st.CurrentWave

	// 1. Retag: label first (idempotent), then record.
	changed := false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		if ns.Wave != wave || ns.Phase != v1alpha1.NamespacePending {
			continue
		}
		if err := c.label(ctx, ns.Name, spec.Tag); err != nil {
			return err
		}
		ns.Phase, changed = v1alpha1.NamespaceRetagged, true
	}
	if changed {
		if err := c.writeStatus(ctx, rm); err != nil {
			return err
		}
	}
	// 2. Stamp: record restartedAt before any workload carries it.
	if err := c.stamp(ctx, rm, wave, v1alpha1.NamespaceRetagged, v1alpha1.NamespaceRestarting); err != nil {
		return err
	}
	// 3. Restart and wait.
	if err := c.drive(ctx, rm, spec, wave, v1alpha1.NamespaceRestarting, v1alpha1.NamespaceReady, to); err != nil {
		return err
	}
	for _, ns := range st.Namespaces {
		if ns.Wave == wave && ns.Phase != v1alpha1.NamespaceReady {
			return nil
		}
	}
	// 4. Gate.
	w := st.Waves[wave]
	verdict := health.Verdict{Outcome: health.Pass}
	if c.cfg.Gate != nil {
		since := time.Time{}
		if st.WaveStartedAt != nil {
			since = st.WaveStartedAt.Time
		}
		verdict, err = c.cfg.Gate.Judge(ctx, WaveInput{Migration: rm.Name, Wave: w.Name, Namespaces: w.Namespaces, Since: since, Spec: spec.Gates})
		if err != nil {
			verdict = health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"gate error: " + err.Error()}}
		}
	}
	switch verdict.Outcome {
	case health.Pass:
		st.CurrentWave++
		now := metav1.NewTime(c.cfg.Now())
		st.WaveStartedAt = &now
		if int(st.CurrentWave) >= len(st.Waves) {
			return c.setPhase(ctx, rm, v1alpha1.MigrationSucceeded, fmt.Sprintf("all %d namespaces on %s", len(st.Namespaces), spec.To))
		}
		return c.setPhase(ctx, rm, v1alpha1.MigrationProgressing, fmt.Sprintf("wave %s passed; starting wave %s", w.Name, st.Waves[st.CurrentWave].Name))
	case health.Fail:
		return c.setPhase(ctx, rm, v1alpha1.MigrationHalted, fmt.Sprintf("wave %s failed its gate: %s", w.Name, strings.Join(verdict.Reasons, "; ")))
	default:
		reason := fmt.Sprintf("wave %s held by its gate: %s", w.Name, strings.Join(verdict.Reasons, "; "))
		if st.Phase == v1alpha1.MigrationGating && st.Reason == reason {
			return nil
		}
		return c.setPhase(ctx, rm, v1alpha1.MigrationGating, reason)
	}
}

func (c *Controller) label(ctx context.Context, ns, value string) error {
	var patch string
	if value == "" {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, istio.LabelRev)
	} else {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, istio.LabelRev, value)
	}
	if _, err := c.cfg.Kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("labelling namespace %s %s=%s: %w", ns, istio.LabelRev, value, err)
	}
	c.cfg.Log.Info("namespace retagged", zap.String("namespace", ns), zap.String(istio.LabelRev, value))
	return nil
}

func (c *Controller) stamp(ctx context.Context, rm *v1alpha1.RevisionMigration, wave int32, from, to v1alpha1.NamespacePhase) error {
	return c.stampWhere(ctx, rm, func(ns *v1alpha1.NamespaceStatus) bool { return ns.Wave == wave && ns.Phase == from }, to)
}

// stampWhere gives the selected namespaces a fresh restartedAt stamp and a
// new generation, and persists it before any workload is touched.
func (c *Controller) stampWhere(ctx context.Context, rm *v1alpha1.RevisionMigration, pick func(*v1alpha1.NamespaceStatus) bool, to v1alpha1.NamespacePhase) error {
	stamp := c.cfg.Now().UTC().Format(time.RFC3339Nano)
	changed := false
	for i := range rm.Status.Namespaces {
		ns := &rm.Status.Namespaces[i]
		if !pick(ns) {
			continue
		}
		ns.RestartedAt, ns.Generation, ns.Phase, ns.Message = stamp, ns.Generation+1, to, "restart recorded"
		changed = true
	}
	if !changed {
		return nil
	}
	return c.writeStatus(ctx, rm)
}
