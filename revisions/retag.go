package revisions

import (
	"context"
	"encoding/json"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
)

// Moving a namespace's labels, either way, is recorded before it is done:
//
//	Pending --record originals--> Retagging --patch--> Retagged
//	moved   --record Reverting--> Reverting (no stamp) --restore--> stamp
//
// The originals are written to status before the first patch and never
// rewritten after it, so a controller killed at any step finds them there.
// Each decision reads the namespace fresh from the API (the cache may not
// show the controller's own last patch yet), and each patch carries the
// resourceVersion read: it applies only to the labels the controller saw.

// retagWave records then patches the labels of the wave's Pending and
// Retagging namespaces.
func (c *Controller) retagWave(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, snap *snapshot, wave int32) error {
	st := &rm.Status
	// 1. Record: the originals as the namespace has them now (its labels may
	// have changed since the migration started).
	recorded := false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		if ns.Wave != wave || ns.Phase != v1alpha1.NamespacePending {
			continue
		}
		recorded = true
		live, err := c.getNamespace(ctx, ns.Name)
		if err != nil {
			return err
		}
		if live == nil {
			ns.Phase, ns.Message = v1alpha1.NamespaceSkipped, "namespace deleted before its wave"
			continue
		}
		sc := ScopeOf(spec, snap.inv, []corev1.Namespace{*live}, snap.pods, c.istioNamespace())
		if len(sc.Members) == 0 {
			why := "it no longer uses " + spec.From
			if len(sc.Skipped) > 0 {
				why = sc.Skipped[0].Reason
			}
			ns.Phase, ns.Message = v1alpha1.NamespaceSkipped, "left alone when its wave came: "+why
			continue
		}
		m := sc.Members[0]
		ns.OriginalLabels, ns.OriginalRev, ns.Adopted = m.Original, m.Original[istio.LabelRev], m.Implicit != ""
		ns.Phase, ns.Message = v1alpha1.NamespaceRetagging, "labels recorded: "+m.Change(spec.Tag)
	}
	if recorded {
		if err := c.writeStatus(ctx, rm); err != nil {
			return err
		}
	}
	// 2. Patch, in one request per namespace, then record Retagged.
	patched := false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		if ns.Wave != wave || ns.Phase != v1alpha1.NamespaceRetagging {
			continue
		}
		live, err := c.getNamespace(ctx, ns.Name)
		if err != nil {
			return err
		}
		switch {
		case live == nil:
			ns.Phase, ns.Message = v1alpha1.NamespaceSkipped, "namespace deleted before its labels were patched"
		case adoptedState(live.Labels, spec.Tag):
			ns.Phase, ns.Message = v1alpha1.NamespaceRetagged, "labelled "+istio.LabelRev+"="+spec.Tag
		case sameOriginal(live.Labels, originals(ns)):
			if err := c.patchLabels(ctx, live, map[string]*string{istio.LabelRev: &spec.Tag, istio.LabelInjection: nil}); err != nil {
				return err
			}
			ns.Phase, ns.Message = v1alpha1.NamespaceRetagged, "labelled "+istio.LabelRev+"="+spec.Tag
		default:
			msg := fmt.Sprintf("labels changed since they were recorded (recorded %s, now %s): not patched; restore them or abort", describe(originals(ns)), describe(live.Labels))
			if ns.Message == msg {
				continue
			}
			ns.Message = msg
		}
		patched = true
	}
	if patched {
		return c.writeStatus(ctx, rm)
	}
	return nil
}

// originals are the labels an abort restores: the recorded ones, or for a
// status written before they were recorded, istio.io/rev alone.
func originals(ns *v1alpha1.NamespaceStatus) map[string]string {
	if ns.Adopted || len(ns.OriginalLabels) > 0 {
		return ns.OriginalLabels
	}
	if ns.OriginalRev == "" {
		return map[string]string{}
	}
	return map[string]string{istio.LabelRev: ns.OriginalRev}
}

// restore puts a moved namespace's recorded labels back, exactly: each of
// istio.io/rev and istio-injection gets its recorded value, or is removed
// when it had none. A namespace whose labels are neither the moved ones nor
// the originals was changed by someone else and is left as it is; the
// returned message says so.
func (c *Controller) restore(ctx context.Context, ns *v1alpha1.NamespaceStatus, tag string) (string, error) {
	live, err := c.getNamespace(ctx, ns.Name)
	if err != nil {
		return "", err
	}
	orig := originals(ns)
	switch {
	case live == nil:
		return "namespace deleted", nil
	case sameOriginal(live.Labels, orig):
		return "labels back to " + describe(orig), nil
	case !adoptedState(live.Labels, tag):
		return fmt.Sprintf("labels changed by someone else (now %s): left as they are", describe(live.Labels)), nil
	}
	want := map[string]*string{}
	for _, k := range []string{istio.LabelRev, istio.LabelInjection} {
		if v, ok := orig[k]; ok {
			want[k] = &v
		} else {
			want[k] = nil
		}
	}
	if err := c.patchLabels(ctx, live, want); err != nil {
		return "", err
	}
	return "labels back to " + describe(orig), nil
}

// patchLabels sets (or, for nil, removes) labels in one merge patch that
// carries the resourceVersion the controller saw, so a namespace changed
// since then is not patched (the conflict retries from a fresh cache).
func (c *Controller) patchLabels(ctx context.Context, ns *corev1.Namespace, labels map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "resourceVersion": ns.ResourceVersion}})
	if err != nil {
		return fmt.Errorf("encoding the label patch of namespace %s: %w", ns.Name, err)
	}
	if _, err := c.cfg.Kube.CoreV1().Namespaces().Patch(ctx, ns.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("namespace %s changed since it was read; retrying: %w", ns.Name, err)
		}
		return fmt.Errorf("patching the labels of namespace %s: %w", ns.Name, err)
	}
	fields := []zap.Field{zap.String("namespace", ns.Name)}
	for k, v := range labels {
		if v == nil {
			fields = append(fields, zap.String(k, "(removed)"))
		} else {
			fields = append(fields, zap.String(k, *v))
		}
	}
	c.cfg.Log.Info("namespace labels patched", fields...)
	return nil
}

// getNamespace reads a namespace from the API (nil when it is gone).
func (c *Controller) getNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	ns, err := c.cfg.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	return ns, nil
}

func (c *Controller) istioNamespace() string {
	if c.cfg.Inventory.IstioNamespace != "" {
		return c.cfg.Inventory.IstioNamespace
	}
	return istio.DefaultNamespace
}
