package revisions

import (
	"context"
	"fmt"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// abort retags every moved namespace back and restarts it; namespaces never
// moved are left alone.
func (c *Controller) abort(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec) error {
	st := &rm.Status
	// Only From is needed to go back: an abort works even if To is gone.
	back, err := c.target(ctx, spec.From)
	if err != nil {
		return err
	}
	changed := false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		switch ns.Phase {
		case v1alpha1.NamespaceRetagged, v1alpha1.NamespaceRestarting, v1alpha1.NamespaceReady:
		default:
			continue
		}
		if err := c.label(ctx, ns.Name, ns.OriginalRev); err != nil {
			return err
		}
		changed = true
		if ns.Generation == 0 {
			ns.Phase, ns.Message = v1alpha1.NamespaceRolledBack, "retagged back before any restart"
			continue
		}
		ns.Phase = v1alpha1.NamespaceReverting
		ns.RestartedAt = ""
	}
	if changed {
		if err := c.writeStatus(ctx, rm); err != nil {
			return err
		}
	}
	// Reverting namespaces without a stamp get one, persisted first.
	if err := c.stampWhere(ctx, rm, func(ns *v1alpha1.NamespaceStatus) bool {
		return ns.Phase == v1alpha1.NamespaceReverting && ns.RestartedAt == ""
	}, v1alpha1.NamespaceReverting); err != nil {
		return err
	}
	if err := c.drive(ctx, rm, spec, -1, v1alpha1.NamespaceReverting, v1alpha1.NamespaceRolledBack, back); err != nil {
		return err
	}
	for _, ns := range st.Namespaces {
		if ns.Phase == v1alpha1.NamespaceReverting {
			return nil
		}
	}
	n := 0
	for _, ns := range st.Namespaces {
		if ns.Phase == v1alpha1.NamespaceRolledBack {
			n++
		}
	}
	return c.setPhase(ctx, rm, v1alpha1.MigrationAborted, fmt.Sprintf("%d namespaces back on %s; %d never moved", n, spec.From, len(st.Namespaces)-n))
}
