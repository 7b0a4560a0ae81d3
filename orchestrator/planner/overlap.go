package planner

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// Two NodeRollouts on one node would corrupt each other's records: a node's
// step annotations hold one rollout's step, and each rollout counts only its
// own maxUnavailable, so one's uncordon could clear the other's cordon
// mid-drain. A rollout that selects a node another unfinished rollout also
// selects therefore waits (Pending, Valid=False, with an Event) until that
// one is finished. Which one goes first: a rollout already under way
// (Progressing, Paused, waiting for a window, Halted, RollingBack) over one
// that is not (new, or finished and woken by a spec change); between two
// alike, the older (creation time, then name).

// Overlapping is the first unfinished rollout in others that claims a node
// me selects before me, as an error naming it and the shared nodes.
func Overlapping(me *v1alpha1.NodeRollout, mine model.Policy, others []*v1alpha1.NodeRollout, nodes []*corev1.Node) error {
	meActive := underWay(me)
	for _, o := range sortedByAge(others) {
		if o.UID == me.UID || o.Name == me.Name || finished(o) || o.DeletionTimestamp != nil {
			continue
		}
		oActive := underWay(o)
		if !(oActive && !meActive) && !(oActive == meActive && olderThan(o, me)) {
			continue
		}
		op, err := model.NewPolicy(o.Spec)
		if err != nil {
			continue // it cannot act on any node while invalid
		}
		var shared []string
		for _, n := range nodes {
			set := labels.Set(n.Labels)
			if mine.Selector.Matches(set) && op.Selector.Matches(set) {
				shared = append(shared, n.Name)
			}
		}
		if len(shared) == 0 {
			continue
		}
		sort.Strings(shared)
		if len(shared) > 5 {
			shared = append(shared[:5], fmt.Sprintf("and %d more", len(shared)-5))
		}
		phase := o.Status.Phase
		if phase == "" {
			phase = v1alpha1.PhasePending
		}
		return fmt.Errorf("waiting for NodeRollout %s (%s), which also selects node(s) %s: two rollouts on one node would undo each other's cordons; let it finish, or abort it, or narrow spec.nodeSelector", o.Name, phase, strings.Join(shared, ", "))
	}
	return nil
}

func underWay(nr *v1alpha1.NodeRollout) bool {
	switch nr.Status.Phase {
	case v1alpha1.PhaseProgressing, v1alpha1.PhasePaused, v1alpha1.PhaseWaitingForWindow, v1alpha1.PhaseHalted, v1alpha1.PhaseRollingBack:
		return true
	}
	return false
}

// finished rollouts act on no node until a spec change wakes them.
func finished(nr *v1alpha1.NodeRollout) bool {
	switch nr.Status.Phase {
	case v1alpha1.PhaseCompleted, v1alpha1.PhaseAborted, v1alpha1.PhaseRolledBack, v1alpha1.PhaseFailed:
		return nr.Status.ObservedGeneration == nr.Generation
	}
	return false
}

func olderThan(a, b *v1alpha1.NodeRollout) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

func sortedByAge(nrs []*v1alpha1.NodeRollout) []*v1alpha1.NodeRollout {
	out := append([]*v1alpha1.NodeRollout(nil), nrs...)
	sort.Slice(out, func(i, j int) bool { return olderThan(out[i], out[j]) })
	return out
}
