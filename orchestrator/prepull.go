package orchestrator

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/prepull"
)

// prepullPods maps each node to its pre-pull pods of the rollout, from the
// pod cache (the target namespaces).
func (e *executor) prepullPods(rollout string, targets []model.TargetView) (map[string]model.PrepullView, error) {
	byNode := map[string][]*corev1.Pod{}
	for _, ns := range targetNamespaces(targets) {
		pods, err := e.pods.Pods(ns).List(labels.SelectorFromSet(labels.Set{model.LabelPrepull: rollout}))
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

// prepull creates (ActPrepull) or deletes (ActPrepullDone) a node's
// pre-pull pods, one per target. Both are idempotent: an existing or missing
// pod is fine.
func (e *executor) prepull(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, a planner.Action) error {
	for _, ref := range p.Targets {
		if a.Kind == planner.ActPrepullDone {
			if err := prepull.Delete(ctx, e.kube, nr, a.Node, ref); err != nil {
				return err
			}
			continue
		}
		tv, err := e.targets.Target(ref)
		if err != nil {
			return err
		}
		if err := prepull.Create(ctx, e.kube, nr, a.Node, tv); err != nil {
			return err
		}
	}
	return nil
}
