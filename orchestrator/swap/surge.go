package swap

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/orchestrator/model"
)

// The surge swap (make-before-break, the default for ztunnel) on one node of
// an OnDelete DaemonSet, in nodewise's order:
//
//  1. nodewise creates a bridge: a pod built exactly as the DaemonSet
//     controller would build the newest revision's pod for the node (labels,
//     controller-revision-hash, tolerations, node affinity), bound to the
//     node, but controlled by the node's current pod of the DaemonSet (its
//     anchor) instead of the DaemonSet, so the DaemonSet controller neither
//     adopts nor prunes it;
//  2. once the bridge is Ready beside the old pod (both listen in every pod
//     netns, SO_REUSEPORT), the older pods are deleted, the anchor last and
//     with propagationPolicy Orphan;
//  3. that deletion is the hand-over: the API server marks the anchor
//     terminating and gives it the orphan finalizer in one write, and the
//     garbage collector removes the bridge's controller reference before it
//     lets the anchor go. The DaemonSet controller sees the anchor
//     terminating first (it counts it and creates no pod), then the bridge
//     without a controller, matching its selector and carrying the newest
//     hash: it adopts it as the node's pod. Each node drains once, as under
//     the chart's RollingUpdate, and nodewise writes nothing after the
//     deletion.
//
// Everything is derived from the pods on the node: which is newest, its
// revision, readiness and controller. A crash at any point resumes from
// there; nodewise down leaves the node with at least one Ready ztunnel and
// the DaemonSet (OnDelete) swaps nothing by itself. The newest pod is never
// deleted while an older one is live: istio-cni hands new pods only to the
// newest ztunnel, so a rollback starts a fresh bridge on the restored
// revision instead.

// annotationTemplateGeneration is the DaemonSet annotation the DaemonSet
// controller copies into its pods' pod-template-generation label.
const (
	annotationTemplateGeneration = "deprecated.daemonset.template.generation"
	labelPodTemplateGeneration   = "pod-template-generation"
)

// SurgeInput is what one surge step is decided from: the DaemonSet, its
// newest ControllerRevision (owned by it), the node, and the pods bound to
// the node in the DaemonSet's namespace (the step picks the DaemonSet's own
// and nodewise's bridges for it).
type SurgeInput struct {
	DaemonSet *appsv1.DaemonSet
	Revision  *appsv1.ControllerRevision
	Node      string
	Pods      []*corev1.Pod
}

// SurgeStepKind is what a surge step does.
type SurgeStepKind string

const (
	// SurgeDone: the node's only live pod is the DaemonSet's, Ready, on the
	// newest revision (older pods may still be draining).
	SurgeDone SurgeStepKind = "Done"
	// SurgeCreateBridge: create Bridge, controlled by Anchor (the newest live
	// pod is on an older revision).
	SurgeCreateBridge SurgeStepKind = "CreateBridge"
	// SurgeWaitReady: the newest pod (Pod) is on the newest revision and not
	// Ready yet.
	SurgeWaitReady SurgeStepKind = "WaitReady"
	// SurgeRetire: delete Older in order; with HandOver the last of them is
	// Pod's anchor, deleted with propagationPolicy Orphan.
	SurgeRetire SurgeStepKind = "Retire"
	// SurgeBridgeFailed: the node's bridge on the newest revision (Pod) is
	// phase Failed: the kubelet rejected it (OutOfcpu, OutOfmemory, a node
	// affinity it could not meet) or it ran to a failure. Its name is the
	// node's and the revision's, so a create repeated would only find it
	// again: the swap halts with the pod's reason, the old pod serving.
	SurgeBridgeFailed SurgeStepKind = "BridgeFailed"
	// SurgeWaitController: the cluster's controllers have to act (the garbage
	// collector hand a bridge over, the DaemonSet controller adopt it or
	// create a pod on a node that has none).
	SurgeWaitController SurgeStepKind = "WaitController"
)

// SurgeStep is the next step of a surge swap on one node.
type SurgeStep struct {
	Kind SurgeStepKind
	// Pod is the newest live pod: the one waited for, kept or handed over.
	Pod *corev1.Pod
	// Older are the live pods older than Pod, in the order to delete them
	// (SurgeRetire): oldest first, Pod's anchor last.
	Older []*corev1.Pod
	// HandOver is set when Pod is a bridge whose anchor is the last of Older:
	// its deletion (propagationPolicy Orphan) hands Pod to the DaemonSet.
	HandOver bool
	// Bridge is the pod to create (SurgeCreateBridge), controlled by Anchor.
	Bridge *corev1.Pod
	// Anchor is the DaemonSet's live pod on the node the bridge is handed
	// over by (SurgeCreateBridge).
	Anchor *corev1.Pod
	Reason string
}

// NextSurgeStep decides the next step of a surge swap from the API objects
// alone. It is pure.
func NextSurgeStep(in SurgeInput) SurgeStep {
	hash := in.Revision.Labels[model.LabelControllerRevisionHash]
	if b := failedBridge(in); b != nil {
		return SurgeStep{Kind: SurgeBridgeFailed, Pod: b, Reason: fmt.Sprintf("surge bridge %s on revision %s failed on the node: %s", b.Name, hash, podFailure(b))}
	}
	live := surgePods(in)
	if len(live) == 0 {
		return SurgeStep{Kind: SurgeWaitController, Reason: "no live pod on the node: the DaemonSet controller creates one (OnDelete)"}
	}
	top := live[len(live)-1]
	older := live[:len(live)-1]
	switch {
	case top.Labels[model.LabelControllerRevisionHash] != hash:
		anchor := newestControlled(live, in.DaemonSet.UID)
		if anchor == nil {
			return SurgeStep{Kind: SurgeWaitController, Pod: top, Reason: fmt.Sprintf("newest pod %s is on revision %s, not %s, and the DaemonSet has no live pod on the node to hand a bridge over by: waiting for it to adopt or create one", top.Name, top.Labels[model.LabelControllerRevisionHash], hash)}
		}
		b := BridgePod(in.DaemonSet, in.Revision, in.Node, anchor)
		if terminating(in, b.Name) {
			// A bridge recreated (Recreate) takes its name back once the
			// first is gone.
			return SurgeStep{Kind: SurgeWaitController, Pod: top, Reason: fmt.Sprintf("surge bridge %s is terminating: it is created again once it is gone", b.Name)}
		}
		return SurgeStep{Kind: SurgeCreateBridge, Pod: top, Bridge: b, Anchor: anchor,
			Reason: fmt.Sprintf("newest pod %s is on revision %s, not %s: start %s beside it, handed over by %s", top.Name, top.Labels[model.LabelControllerRevisionHash], hash, b.Name, anchor.Name)}
	case !podIsReady(top):
		return SurgeStep{Kind: SurgeWaitReady, Pod: top, Reason: fmt.Sprintf("pod %s on revision %s is not Ready%s", top.Name, hash, model.WaitingReason(top))}
	case len(older) > 0:
		st := SurgeStep{Kind: SurgeRetire, Pod: top, Reason: fmt.Sprintf("pod %s is Ready on revision %s: retire %d older pod(s)", top.Name, hash, len(older))}
		var anchor *corev1.Pod
		for _, p := range older {
			if isBridge(top, in.DaemonSet) && metav1.IsControlledBy(top, p) {
				anchor = p
				continue
			}
			st.Older = append(st.Older, p)
		}
		if anchor != nil {
			st.Older, st.HandOver = append(st.Older, anchor), true
			st.Reason += fmt.Sprintf(", %s last: its deletion hands %s over to the DaemonSet", anchor.Name, top.Name)
		}
		return st
	case isBridge(top, in.DaemonSet):
		c := metav1.GetControllerOf(top)
		return SurgeStep{Kind: SurgeWaitController, Pod: top, Reason: fmt.Sprintf("pod %s's anchor %s is deleted: waiting for the garbage collector to hand it over", top.Name, c.Name)}
	case !controlledBy(top, in.DaemonSet.UID):
		return SurgeStep{Kind: SurgeWaitController, Pod: top, Reason: fmt.Sprintf("pod %s was handed over; waiting for the DaemonSet controller to adopt it", top.Name)}
	}
	return SurgeStep{Kind: SurgeDone, Pod: top, Reason: fmt.Sprintf("pod %s is the DaemonSet's, Ready on revision %s", top.Name, hash)}
}

// newestControlled is the newest of live (oldest first) the DaemonSet
// controls, or nil.
func newestControlled(live []*corev1.Pod, ds types.UID) *corev1.Pod {
	for i := len(live) - 1; i >= 0; i-- {
		if controlledBy(live[i], ds) {
			return live[i]
		}
	}
	return nil
}

// SurgeLeftovers are the bridges an abandoned surge swap leaves that must go:
// every bridge of the DaemonSet on the node that is not Ready (it never
// served, so deleting it strands no pod), Failed ones included (surgePods
// leaves those out: they are not live). A Ready bridge is the newest
// ztunnel and is never deleted while an older one is live: the caller
// finishes the swap instead (NextSurgeStep).
func SurgeLeftovers(in SurgeInput) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range surgePods(in) {
		if isBridge(p, in.DaemonSet) && !podIsReady(p) {
			out = append(out, p)
		}
	}
	for _, p := range in.Pods {
		if p.Spec.NodeName == in.Node && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodFailed && isBridge(p, in.DaemonSet) {
			out = append(out, p)
		}
	}
	return out
}

// terminating: the pod named name on the node is being deleted.
func terminating(in SurgeInput, name string) bool {
	for _, p := range in.Pods {
		if p.Name == name && p.DeletionTimestamp != nil {
			return true
		}
	}
	return false
}

// failedBridge is the node's bridge on the newest revision when it is phase
// Failed (not being deleted), else nil.
func failedBridge(in SurgeInput) *corev1.Pod {
	name := BridgeName(in.DaemonSet, in.Revision, in.Node)
	for _, p := range in.Pods {
		if p.Name == name && p.Spec.NodeName == in.Node && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodFailed && isBridge(p, in.DaemonSet) {
			return p
		}
	}
	return nil
}

// podFailure is a Failed pod's reason and message as the kubelet wrote
// them ("OutOfcpu: Pod was rejected: ..."), bounded.
func podFailure(p *corev1.Pod) string {
	why := p.Status.Reason
	if p.Status.Message != "" {
		if why != "" {
			why += ": "
		}
		why += p.Status.Message
	}
	if why == "" {
		why = "phase Failed, no reason given"
	}
	return model.Truncate(why, 512)
}

// surgePods are the live pods of the DaemonSet on the node (its own, nodewise's
// bridges for it, and handed-over bridges not adopted yet), oldest first. A
// tie within the API's one-second timestamps puts the pod on the newest
// revision last, then the DaemonSet's own (it creates a pod only on a node
// that had none of its own), then by name.
func surgePods(in SurgeInput) []*corev1.Pod {
	hash := in.Revision.Labels[model.LabelControllerRevisionHash]
	var live []*corev1.Pod
	for _, p := range in.Pods {
		if p.Spec.NodeName != in.Node || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if controlledBy(p, in.DaemonSet.UID) || isBridge(p, in.DaemonSet) || isHandedOver(p, in.DaemonSet) {
			live = append(live, p)
		}
	}
	rank := func(p *corev1.Pod) int {
		r := 0
		if p.Labels[model.LabelControllerRevisionHash] == hash {
			r += 2
		}
		if controlledBy(p, in.DaemonSet.UID) {
			r++
		}
		return r
	}
	sort.SliceStable(live, func(i, j int) bool {
		a, b := live[i], live[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if rank(a) != rank(b) {
			return rank(a) < rank(b)
		}
		return a.Name < b.Name
	})
	return live
}

// isBridge: nodewise's bridge for the DaemonSet, not handed over yet (still
// controlled by its anchor pod).
func isBridge(p *corev1.Pod, ds *appsv1.DaemonSet) bool {
	return p.Labels[model.LabelSurgeBridge] == ds.Name && model.ControllerKind(p) == "Pod"
}

// isHandedOver: a bridge whose controller reference the garbage collector
// removed, which the DaemonSet controller has not adopted yet (no
// controller, the DaemonSet's labels).
func isHandedOver(p *corev1.Pod, ds *appsv1.DaemonSet) bool {
	if metav1.GetControllerOf(p) != nil || ds.Spec.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	return err == nil && !sel.Empty() && sel.Matches(model.LabelSet(p.Labels)) && p.Labels[model.LabelControllerRevisionHash] != ""
}

func controlledBy(p *corev1.Pod, uid types.UID) bool {
	c := metav1.GetControllerOf(p)
	return c != nil && c.UID == uid
}

func podIsReady(p *corev1.Pod) bool {
	ok, _ := model.PodReadyCondition(p)
	return ok
}

// BridgeName is the bridge's name for a node and revision: deterministic, so
// a create repeated after a crash finds the first one (AlreadyExists). The
// revision number is in it because a rollback reuses a ControllerRevision
// (same hash) with a higher number, while the last bridge of that hash may
// still be draining.
func BridgeName(ds *appsv1.DaemonSet, rev *appsv1.ControllerRevision, node string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + rev.Labels[model.LabelControllerRevisionHash] + "\x00" + strconv.FormatInt(rev.Revision, 10)))
	return ds.Name + "-surge-" + hex.EncodeToString(sum[:])[:10]
}

// BridgePod builds the bridge for a node: the pod the DaemonSet controller
// would create there from the newest revision (the DaemonSet's template,
// which that revision records; its hash and template generation labels; the
// DaemonSet controller's default tolerations; required node affinity to the
// node), bound to the node directly, labelled as a bridge and controlled by
// anchor, the DaemonSet's pod on the node: the DaemonSet neither adopts it
// early nor prunes it as excess; anchor's deletion with propagationPolicy
// Orphan hands it over, and any other deletion of anchor (someone else's, or
// the DaemonSet's own) takes the bridge with it, as the DaemonSet then
// replaces the node's pod itself.
func BridgePod(ds *appsv1.DaemonSet, rev *appsv1.ControllerRevision, node string, anchor *corev1.Pod) *corev1.Pod {
	t := ds.Spec.Template.DeepCopy()
	labels := map[string]string{}
	for k, v := range t.Labels {
		labels[k] = v
	}
	labels[model.LabelControllerRevisionHash] = rev.Labels[model.LabelControllerRevisionHash]
	if g, ok := ds.Annotations[annotationTemplateGeneration]; ok {
		labels[labelPodTemplateGeneration] = g
	}
	labels[model.LabelSurgeBridge] = ds.Name
	spec := t.Spec
	spec.NodeName = node
	AddDaemonTolerations(&spec)
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
	yes, no := true, false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: BridgeName(ds, rev, node), Namespace: ds.Namespace,
			Labels: labels, Annotations: t.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: anchor.Name, UID: anchor.UID,
				Controller: &yes, BlockOwnerDeletion: &no,
			}},
		},
		Spec: spec,
	}
}

// AddDaemonTolerations adds the tolerations the DaemonSet controller gives
// every pod it creates, so the bridge, once adopted, is what it would have
// made (and node problems do not evict it).
func AddDaemonTolerations(spec *corev1.PodSpec) {
	tol := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if spec.HostNetwork {
		tol = append(tol, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	for _, t := range tol {
		found := false
		for i := range spec.Tolerations {
			if spec.Tolerations[i].Key == t.Key && spec.Tolerations[i].Effect == t.Effect {
				spec.Tolerations[i] = t
				found = true
				break
			}
		}
		if !found {
			spec.Tolerations = append(spec.Tolerations, t)
		}
	}
}
