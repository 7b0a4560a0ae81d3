package e2e

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
)

// TestFullRollout: 20 nodes, 3 zones, 2 canaries, 1.27.3 → 1.28.1 under OnDelete.
func TestFullRollout(t *testing.T) {
	t.Parallel()
	const nodes = 20
	e := newEnv(t, nodes, 3)
	pre := e.c.Nodes[7].Name
	e.cordon(pre)
	canaries := []string{e.c.Nodes[5].Name, e.c.Nodes[13].Name}
	w := e.watch(pre)
	e.upgrade("1.28.1")
	e.runInProcess("solo")
	e.apply(rollout("full", func(s *v1alpha1.NodeRolloutSpec) {
		s.CanaryNodes = canaries
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(4), intstr.FromInt32(3)
	}))
	nr := e.waitPhase("full", 5*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	if nr.Status.Counts.Done != nodes {
		t.Errorf("counts %+v, want %d done", nr.Status.Counts, nodes)
	}
	e.assertAllOnNewest(nodes)
	time.Sleep(500 * time.Millisecond) // let the watcher drain its channel
	got, worst := w.max()
	t.Logf("max unavailable seen %d (%s); swap order %v", got, worst, w.swapOrder())
	if got > 3 {
		t.Errorf("watcher saw %d nodes unavailable at once (> maxUnavailable 3): %s", got, worst)
	}
	if got == 0 {
		t.Errorf("watcher saw no unavailable node at all: it is not watching")
	}
	order := w.swapOrder()
	if len(order) != nodes {
		t.Fatalf("watcher saw swaps on %d nodes, want %d: %v", len(order), nodes, order)
	}
	if !(order[0] == canaries[0] && order[1] == canaries[1]) {
		t.Errorf("canaries not first: %v", order[:2])
	}
	zone := ""
	seen := map[string]bool{}
	for _, n := range order[2:] {
		z := zoneOf(e.c, n)
		if z != zone {
			if seen[z] {
				t.Errorf("zone %s revisited at node %s: order %v", z, n, order)
			}
			seen[z], zone = true, z
		}
	}
	for k, n := range w.deletes {
		if n != 1 {
			t.Errorf("%s: %d old pods deleted, want exactly 1", k, n)
		}
	}
	uns := e.unschedulable()
	if !uns[pre] {
		t.Errorf("pre-cordoned node %s was uncordoned", pre)
	}
	if len(uns) != 1 {
		t.Errorf("cordons left behind: %v", uns)
	}
	_ = context.Background
	_ = cluster.ZtunnelName
}
