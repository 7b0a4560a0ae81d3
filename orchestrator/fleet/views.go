package fleet

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/prepull"
	"github.com/nodewise/nodewise/orchestrator/roster"
)

// View is what a rollout's last full pass planned from, kept so that the
// passes informer events start rebuild only the views of the nodes the
// events named (ViewOf, roster.Roster.Update) instead of observing the
// fleet again, and plan from the facts kept with them (planner.PlanFrom).
type View struct {
	UID types.UID
	// Finished: the pass returned before observing (a finished rollout):
	// no node's change wakes it.
	Finished bool
	In       *Inputs
	// Roster keeps the node views in the order the full pass listed them,
	// so that a views pass plans over them in the same order, with what
	// the plan reads of each.
	Roster *roster.Roster
	// Unreadable are the other tools' locks the full pass could not read.
	Unreadable []string
}

// NewView is the view of a pass's snapshot, its nodes kept by r.
func NewView(in *Inputs, snap model.Snapshot, r *roster.Roster) *View {
	return &View{In: in, Roster: r, Unreadable: snap.UnreadableLocks}
}

// Snapshot is the planner's snapshot from the kept views: what Observe
// would build, without observing the fleet again. Its nodes are the
// roster's own (not a copy): Roster.Update changes them in place.
func (v *View) Snapshot(nr *v1alpha1.NodeRollout) model.Snapshot {
	return model.Snapshot{Status: nr.Status, ResumeRequested: model.ResumeRequested(nr.Annotations), Targets: v.In.targets, UnreadableLocks: v.Unreadable, Nodes: v.Roster.Nodes()}
}

// ViewOf is one node's view from its own pods alone: the inputs of the
// fleet-wide ones (Observe) narrowed to the pods bound to the node.
func (o *Observer) ViewOf(n *corev1.Node, in *Inputs) (model.NodeView, error) {
	pods, err := o.Pods.OnNode(n.Name)
	if err != nil {
		return model.NodeView{}, err
	}
	np := &nodePods{}
	namespaces := targetNamespaces(in.targets)
	var blocking, pulls []*corev1.Pod
	for _, p := range pods {
		addTargetPod(np, p, in.targets)
		if in.blocking != nil {
			blocking = append(blocking, p)
		}
		if p.Labels[model.LabelPrepull] == in.rollout && slices.Contains(namespaces, p.Namespace) && p.DeletionTimestamp == nil {
			pulls = append(pulls, p)
		}
	}
	np.blocked = planner.BlockingPods(blocking, in.blocking)[n.Name]
	if len(pulls) > 0 {
		np.prepull = prepull.View(pulls, in.prepullWant)
	}
	return o.nodeView(n, np, in)
}
