package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestOverlappingRolloutWaits: a second NodeRollout that selects a node the
// first (under way) also selects waits, Pending with Valid=False naming the
// first and the node, and an Event, and never writes a step on any node;
// once the first completes it goes on (its node is already on the newest
// revision, so it completes without a swap).
func TestOverlappingRolloutWaits(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	shared := e.c.Nodes[2].Name // the first rollout's last node
	e.runInProcess("solo")
	e.upgrade("1.28.1")
	e.apply(rollout("first", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Soak = &v1alpha1.Duration{Duration: 2 * time.Second}
	}))
	e.waitPhase("first", time.Minute, v1alpha1.PhaseProgressing)
	e.apply(rollout("second", func(s *v1alpha1.NodeRolloutSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": shared}}
	}))
	ctx := context.Background()
	sawWaiting := false
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		first, err := e.rollouts.Get(ctx, "first", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		second, err := e.rollouts.Get(ctx, "second", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if first.Status.Phase == v1alpha1.PhaseCompleted {
			return true, nil
		}
		if second.Status.Phase != "" && second.Status.Phase != v1alpha1.PhasePending {
			t.Fatalf("second rollout %s while the first is %s: want it to wait", second.Status.Phase, first.Status.Phase)
		}
		if msg := conditionMessage(second, "Valid"); second.Status.Phase == v1alpha1.PhasePending {
			if !strings.Contains(msg, "waiting for NodeRollout first") || !strings.Contains(msg, shared) {
				t.Fatalf("second rollout's Valid condition %q does not name the first rollout and %s", msg, shared)
			}
			sawWaiting = true
		}
		nl, err := e.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, n := range nl.Items {
			if n.Annotations[model.AnnotationRollout] == "second" {
				t.Fatalf("node %s holds a step of the second rollout while the first is %s", n.Name, first.Status.Phase)
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("first rollout never completed: %v", err)
	}
	if !sawWaiting {
		t.Error("never saw the second rollout waiting (Pending) while the first was under way")
	}
	second := e.waitPhase("second", time.Minute, v1alpha1.PhaseCompleted)
	if second.Status.Counts.Done != 1 || second.Status.Counts.Total != 1 {
		t.Errorf("second rollout counts %+v, want its one node Done", second.Status.Counts)
	}
	evs, err := e.c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=second"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs.Items {
		if strings.Contains(ev.Message, "waiting for NodeRollout first") {
			found = true
		}
	}
	if !found {
		t.Errorf("no Event on the second rollout says it waits for the first (%d events)", len(evs.Items))
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left: %v", uns)
	}
}
