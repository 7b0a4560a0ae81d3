package fleet

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/prepull"
)

// blockingPods maps each node a pod matching spec.blocking.podSelector runs
// on to the reason, from the pod cache (every namespace).
func (o *Observer) blockingPods(b model.Blocking) (map[string]string, error) {
	if b.Pods == nil {
		return nil, nil
	}
	pods, err := o.Pods.List(b.Pods)
	if err != nil {
		return nil, fmt.Errorf("listing pods for spec.blocking.podSelector: %w", err)
	}
	return planner.BlockingPods(pods, b.Pods), nil
}

// prepullPods maps each node to its pre-pull pods of the rollout, from the
// pod cache (the target namespaces).
func (o *Observer) prepullPods(rollout string, targets []model.TargetView) (map[string]model.PrepullView, error) {
	byNode := map[string][]*corev1.Pod{}
	for _, ns := range targetNamespaces(targets) {
		pods, err := o.Pods.Pods(ns).List(labels.SelectorFromSet(labels.Set{model.LabelPrepull: rollout}))
		if err != nil {
			return nil, fmt.Errorf("listing pre-pull pods: %w", err)
		}
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
				byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
			}
		}
	}
	want := prepull.Want(targets)
	out := map[string]model.PrepullView{}
	for node, pods := range byNode {
		out[node] = prepull.View(pods, want)
	}
	return out, nil
}

// targetNamespaces is the targets' namespaces, each once, in order.
func targetNamespaces(targets []model.TargetView) []string {
	var namespaces []string
	for _, tv := range targets {
		if !slices.Contains(namespaces, tv.Ref.Namespace) {
			namespaces = append(namespaces, tv.Ref.Namespace)
		}
	}
	return namespaces
}

// Overlapping says nr's nodes overlap another live rollout's, from the
// rollout and node caches.
func (o *Observer) Overlapping(nr *v1alpha1.NodeRollout, p model.Policy) error {
	var all []*v1alpha1.NodeRollout
	for _, obj := range o.Rollouts.List() {
		all = append(all, obj.(*v1alpha1.NodeRollout))
	}
	if len(all) < 2 {
		return nil
	}
	nodes, err := o.Nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	return planner.Overlapping(nr, p, all, nodes)
}

// typeTargets names the targets' kinds from the DaemonSet cache
// (model.TypeTargets).
func (o *Observer) typeTargets(p model.Policy) (model.Policy, error) {
	return model.TypeTargets(p, func(ns, name string) (*appsv1.DaemonSet, error) { return o.DaemonSets.DaemonSets(ns).Get(name) })
}

// targetsBehind reads the target DaemonSets from the API and says which the
// cache holds at another generation ("" when none).
func (o *Observer) targetsBehind(ctx context.Context, refs []v1alpha1.TargetRef) (string, error) {
	for _, ref := range refs {
		live, err := o.Live(ctx, ref.Namespace, ref.Name)
		if err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("reading DaemonSet %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		cached, cerr := o.DaemonSets.DaemonSets(ref.Namespace).Get(ref.Name)
		switch {
		case (err == nil) != (cerr == nil):
			return fmt.Sprintf("the DaemonSet cache is behind the API on %s/%s", ref.Namespace, ref.Name), nil
		case err == nil && (live.Generation != cached.Generation || live.Status.ObservedGeneration != cached.Status.ObservedGeneration):
			return fmt.Sprintf("the DaemonSet cache holds %s/%s at generation %d (observed %d), the API at %d (observed %d)",
				ref.Namespace, ref.Name, cached.Generation, cached.Status.ObservedGeneration, live.Generation, live.Status.ObservedGeneration), nil
		}
	}
	return "", nil
}

// alertsBlock reads spec.blocking.alerts through the gate's Prometheus
// client: why they hold every start, "" when they do not (none set, or none
// firing). A read that fails holds them (fail closed).
func (o *Observer) alertsBlock(ctx context.Context, b model.Blocking) string {
	if len(b.Alerts) == 0 {
		return ""
	}
	raw, err := o.Alerts(ctx, b.Address)
	firing := make([]planner.FiringAlert, 0, len(raw))
	for _, ls := range raw {
		firing = append(firing, ls)
	}
	return planner.AlertsBlock(b, firing, err)
}
