package demo

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
)

// healthyRollout rolls every node with drain auto, canary first, then waves
// of up to two nodes; a PDB that refuses an eviction is waited out.
func healthyRollout(name, canary string) *v1alpha1.NodeRollout {
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: name}}
	nr.Spec.CanaryNodes = []string{canary}
	nr.Spec.MaxParallel, nr.Spec.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
	nr.Spec.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAuto, PDBBlocked: v1alpha1.PDBWait}
	nr.Spec.SwapTimeout = &v1alpha1.Duration{Duration: time.Minute}
	nr.Spec.Baseline, nr.Spec.Soak = &v1alpha1.Duration{}, &v1alpha1.Duration{} // explicit: the defaults last minutes
	return nr
}

// demoHealthyRollout is the demo's healthy rollout; judged, each node gets a
// 5 s baseline and a 5 s soak. A drained node has no pods left in its soak,
// so the judge has no traffic to go on there: too little traffic passes
// (gates.inconclusive Pass) instead of holding the rollout forever. A node
// swapped in place keeps its pods and is judged on them.
func demoHealthyRollout(name, canary string, judge bool) *v1alpha1.NodeRollout {
	nr := healthyRollout(name, canary)
	if judge {
		demoGates(judged(nr, 5*time.Second, 5*time.Second, v1alpha1.InconclusivePass))
	}
	return nr
}

// faultyRollout is the same rollout with a short swap timeout, so a build
// that never gets Ready halts the canary quickly. Judged (an -rst build), the
// canary is swapped in place so its pods keep their traffic through the new
// build, and soaks long enough for its resets to be significant.
func faultyRollout(name, canary string, judge bool) *v1alpha1.NodeRollout {
	nr := healthyRollout(name, canary)
	nr.Spec.SwapTimeout = &v1alpha1.Duration{Duration: 20 * time.Second}
	if judge {
		nr.Spec.SwapTimeout = &v1alpha1.Duration{Duration: time.Minute} // the old ztunnel drains first
		nr.Spec.Drain.Policy = v1alpha1.DrainNever
		demoGates(judged(nr, 5*time.Second, 10*time.Second, v1alpha1.InconclusivePause))
	}
	return nr
}

// demoGates lowers the judge's traffic floors to what one simulated node's
// few pods make in a soak of seconds (a few connections a second each).
func demoGates(nr *v1alpha1.NodeRollout) *v1alpha1.NodeRollout {
	nr.Spec.Gates.MinEvents = 10
	nr.Spec.Gates.MinNodeConnections = 50
	return nr
}

func terminal(p v1alpha1.RolloutPhase) bool {
	switch p {
	case v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted, v1alpha1.PhaseAborted, v1alpha1.PhaseRolledBack, v1alpha1.PhaseFailed:
		return true
	}
	return false
}

// runRollout creates nr and shows its progress until it reaches a terminal
// phase, from a watch of nr (a list, then its changes; relisted if the
// watch breaks), within 15 minutes.
func runRollout(ctx context.Context, rc v1alpha1.NodeRolloutInterface, nr *v1alpha1.NodeRollout, v *view) (*v1alpha1.NodeRollout, error) {
	if _, err := rc.Create(ctx, nr, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating NodeRollout %s: %w", nr.Name, err)
	}
	const limit = 15 * time.Minute
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	lw := cluster.ListWatch(rc.List, rc.Watch, cluster.ByName(nr.Name))
	var last *v1alpha1.NodeRollout
	// Deleted before the watch's first list: no Deleted event will come.
	listed := func(store cache.Store) (bool, error) {
		if _, exists, err := store.GetByKey(nr.Name); err == nil && !exists {
			return false, fmt.Errorf("NodeRollout %s was deleted before it finished (phase -)", nr.Name)
		}
		return false, nil
	}
	_, err := watchtools.UntilWithSync(wctx, lw, &v1alpha1.NodeRollout{}, listed, func(e watch.Event) (bool, error) {
		cur, ok := e.Object.(*v1alpha1.NodeRollout)
		if !ok {
			return false, nil
		}
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("NodeRollout %s was deleted before it finished (phase %s)", nr.Name, orDash(string(cur.Status.Phase)))
		}
		v.show(cur)
		last = cur
		return terminal(cur.Status.Phase), nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if wctx.Err() != nil {
			return nil, fmt.Errorf("NodeRollout %s did not finish within %s", nr.Name, limit)
		}
		return nil, err
	}
	v.final(last)
	return last, nil
}
