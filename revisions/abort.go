package revisions

import (
	"context"
	"fmt"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/conformance"
)

func abortReason(scope v1alpha1.AbortScope) string {
	if scope == v1alpha1.AbortWave {
		return "abort of the current wave requested"
	}
	return "abort requested"
}

// abort retags the moved namespaces in the abort's scope back and restarts
// them: the current wave's (abort: wave) or every wave's (abort: all).
// Namespaces never moved are left alone.
func (c *Controller) abort(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, snap *snapshot) (time.Duration, error) {
	st := &rm.Status
	// Only From is needed to go back: an abort works even if To is gone.
	back, err := targetOf(snap.inv, spec.From)
	if err != nil {
		return 0, err
	}
	if err := c.stopConformance(ctx, rm); err != nil {
		return 0, err
	}
	// After the last wave passed, the current wave is the last one.
	current := min(st.CurrentWave, int32(len(st.Waves))-1)
	inScope := func(ns *v1alpha1.NamespaceStatus) bool {
		return spec.Abort != v1alpha1.AbortWave || ns.Wave == current
	}
	// 1. Record the rollback before any label changes.
	changed := false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		switch ns.Phase {
		case v1alpha1.NamespaceRetagging, v1alpha1.NamespaceRetagged, v1alpha1.NamespaceRestarting, v1alpha1.NamespaceReady:
		default:
			continue
		}
		if !inScope(ns) {
			continue
		}
		ns.Phase, ns.RestartedAt, ns.Message, changed = v1alpha1.NamespaceReverting, "", "rollback recorded", true
	}
	if changed {
		if err := c.writeStatus(ctx, rm); err != nil {
			return 0, err
		}
	}
	// 2. Restore the recorded labels, then record the restart stamp (or, for
	// a namespace never restarted, that it is back) before any workload is
	// touched. Restoring is idempotent: a crash in between repeats it.
	stamp := c.cfg.Now().UTC().Format(time.RFC3339Nano)
	changed = false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		if ns.Phase != v1alpha1.NamespaceReverting || ns.RestartedAt != "" {
			continue
		}
		var msg string
		if spec.Waypoints == v1alpha1.WaypointsOnly {
			// Canaries first: their users go back to the untouched (or
			// restored) primary.
			if err = c.removeCanaries(ctx, ns); err == nil {
				msg, err = c.restoreWaypoints(ctx, ns, spec.To)
			}
		} else {
			msg, err = c.restore(ctx, ns, spec.Tag)
		}
		if err != nil {
			return 0, err
		}
		changed = true
		if ns.Generation == 0 {
			ns.Phase, ns.Message = v1alpha1.NamespaceRolledBack, msg+"; never restarted"
			continue
		}
		ns.RestartedAt, ns.Generation, ns.Message = stamp, ns.Generation+1, msg+"; restart recorded"
	}
	if changed {
		if err := c.writeStatus(ctx, rm); err != nil {
			return 0, err
		}
	}
	var wait time.Duration
	if spec.Waypoints == v1alpha1.WaypointsOnly {
		wait, err = c.waitWaypoints(ctx, rm, snap, -1, v1alpha1.NamespaceReverting, v1alpha1.NamespaceRolledBack, back, false)
	} else {
		wait, err = c.drive(ctx, rm, spec, snap, -1, v1alpha1.NamespaceReverting, v1alpha1.NamespaceRolledBack, back)
	}
	if err != nil {
		return 0, err
	}
	for _, ns := range st.Namespaces {
		if ns.Phase == v1alpha1.NamespaceReverting {
			return wait, nil
		}
	}
	rolledBack, stay := 0, 0
	for _, ns := range st.Namespaces {
		switch ns.Phase {
		case v1alpha1.NamespaceRolledBack:
			rolledBack++
		case v1alpha1.NamespaceRetagged, v1alpha1.NamespaceRestarting, v1alpha1.NamespaceReady:
			stay++
		}
	}
	reason := fmt.Sprintf("%d namespaces back on %s; %d never moved", rolledBack, spec.From, len(st.Namespaces)-rolledBack)
	if spec.Abort == v1alpha1.AbortWave && current >= 0 {
		reason = fmt.Sprintf("wave %s rolled back: %d namespaces back on %s; %d of earlier waves stay on %s; %d never moved",
			st.Waves[current].Name, rolledBack, spec.From, stay, spec.To, len(st.Namespaces)-rolledBack-stay)
	}
	return 0, c.setPhase(ctx, rm, v1alpha1.MigrationAborted, reason)
}

// stopConformance ends a conformance run the abort finds in flight: the
// run is recorded Failed first, then its Job (and pods) deleted, so the
// suite stops testing a revision the abort moves away from.
func (c *Controller) stopConformance(ctx context.Context, rm *v1alpha1.RevisionMigration) error {
	rec := rm.Status.Conformance
	if rec == nil || rec.Outcome != v1alpha1.ConformanceRunning {
		return nil
	}
	rec.Outcome, rec.Message = v1alpha1.ConformanceFailed, "stopped by the abort: its Job was deleted"
	if err := c.writeStatus(ctx, rm); err != nil {
		return err
	}
	return conformance.Runner{Kube: c.cfg.Kube}.Remove(ctx, *rec)
}
