package revisions

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/revisions/revtag"
)

// ConditionTagHandedOver is True once a Succeeded migration with
// spec.stableTag has handed its namespaces over to that tag: the stable tag
// points at To and every moved namespace is labelled istio.io/rev=<stableTag>.
// It is False, reason Held, while a namespace the migration did not move
// uses the stable tag (moving the tag would change that namespace's next
// pods unjudged). The migration's reason says the same, so that Argo CD and
// kstatus show it beside Succeeded.
const ConditionTagHandedOver = "TagHandedOver"

// A migration's tag is the canary: namespaces are moved onto it wave by wave,
// judged, and stay on it. spec.stableTag ends that: the long-lived tag (the
// one istiod's Helm revisionTags or the namespaces in Git name) is moved to
// To, and the moved namespaces go onto it. Nothing is restarted: both tags
// now point at To, so each namespace's next pods get the proxy they run.
//
//	Succeeded --hold check--> stable tag -> To --relabel each--> TagHandedOver
//
// Every step is idempotent and decided from the live objects, so a
// controller killed in between repeats it.

// handedOver reports whether the migration's namespaces were handed over.
func handedOver(st v1alpha1.RevisionMigrationStatus) bool {
	return meta.IsStatusConditionTrue(st.Conditions, ConditionTagHandedOver)
}

// handoverBegun reports whether the stable tag already points at To: a
// controller may have stopped between moving it and relabelling the
// namespaces, whose recorded labels would now lead to To, so an abort waits
// for the handover to finish (and is then refused).
func handoverBegun(spec v1alpha1.RevisionMigrationSpec, snap *snapshot) bool {
	return snap.inv.Tags[spec.StableTag] == spec.To
}

// handover moves spec.StableTag to spec.To and each moved namespace onto it.
func (c *Controller) handover(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, snap *snapshot) error {
	st := &rm.Status
	moved := map[string]bool{}
	for _, ns := range st.Namespaces {
		if ns.Phase == v1alpha1.NamespaceReady {
			moved[ns.Name] = true
		}
	}
	if hold := stableTagHold(spec, snap.inv.Tags, snap.objects.Namespaces, moved); hold != "" {
		cur := meta.FindStatusCondition(st.Conditions, ConditionTagHandedOver)
		if cur != nil && cur.Message == hold {
			return nil
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionTagHandedOver, Status: metav1.ConditionFalse, Reason: "Held", Message: conditionMessage(hold), ObservedGeneration: rm.Generation})
		st.Reason = succeededReason(st, spec) + "; handover held: " + hold
		return c.writeStatus(ctx, rm)
	}
	if err := revtag.Set(ctx, c.cfg.Kube, revtag.SetOptions{Tag: spec.StableTag, Revision: spec.To, IstioNamespace: c.cfg.Inventory.IstioNamespace, Overwrite: true, FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("pointing stable tag %s at %s: %w", spec.StableTag, spec.To, err)
	}
	onStable := 0
	var changed []string
	for _, ns := range st.Namespaces {
		if !moved[ns.Name] {
			continue
		}
		live, err := c.getNamespace(ctx, ns.Name)
		if err != nil {
			return err
		}
		switch {
		case live == nil:
		case adoptedState(live.Labels, spec.StableTag):
			onStable++
		case adoptedState(live.Labels, spec.Tag):
			if err := c.patchLabels(ctx, live, map[string]*string{istio.LabelRev: &spec.StableTag, istio.LabelInjection: nil}); err != nil {
				return err
			}
			onStable++
		default:
			changed = append(changed, fmt.Sprintf("%s (%s)", ns.Name, describe(live.Labels)))
		}
	}
	msg := fmt.Sprintf("%d namespaces on tag %s (-> %s); tag %s points at %s with no namespace moved by this migration on it", onStable, spec.StableTag, spec.To, spec.Tag, spec.To)
	if len(changed) > 0 {
		msg += fmt.Sprintf("; left as someone else labelled them: %s", strings.Join(changed, ", "))
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionTagHandedOver, Status: metav1.ConditionTrue, Reason: "HandedOver", Message: conditionMessage(msg), ObservedGeneration: rm.Generation})
	st.Reason = succeededReason(st, spec) + "; handed over to tag " + spec.StableTag
	return c.writeStatus(ctx, rm)
}

// stableTagHold says why the stable tag cannot move to spec.To yet, or ""
// when it can: it does not exist, already points at To, or no namespace
// outside moved uses it (labelled istio.io/rev=<stableTag> without
// istio-injection, which would take precedence). It is pure.
func stableTagHold(spec v1alpha1.RevisionMigrationSpec, tags map[string]string, nss []corev1.Namespace, moved map[string]bool) string {
	cur, ok := tags[spec.StableTag]
	if !ok || cur == spec.To {
		return ""
	}
	var others []string
	for _, ns := range nss {
		if adoptedState(ns.Labels, spec.StableTag) && !moved[ns.Name] {
			others = append(others, ns.Name)
		}
	}
	if len(others) == 0 {
		return ""
	}
	sort.Strings(others)
	return fmt.Sprintf("tag %s (-> %s) is still used by namespaces this migration did not move: %s; moving the tag to %s would put their next pods on it unjudged: move them with another migration or relabel them",
		spec.StableTag, cur, strings.Join(others, ","), spec.To)
}

// refuseAbortAfterHandover says, once, that an abort set after the handover
// does nothing: the namespaces are on the stable tag, no longer on the
// migration's, and the way back is to move that tag.
func (c *Controller) refuseAbortAfterHandover(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec) error {
	if spec.Abort == "" {
		return nil
	}
	reason := fmt.Sprintf("abort ignored: the namespaces were handed over to tag %s; to go back, point it at %s (nodewise tag set %s --revision %s --overwrite) and restart them",
		spec.StableTag, spec.From, spec.StableTag, spec.From)
	if rm.Status.Reason == reason {
		return nil
	}
	return c.setPhase(ctx, rm, rm.Status.Phase, reason)
}
