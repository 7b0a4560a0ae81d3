package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestAbortReachesAStuckDrain: with pdbBlocked wait and a long drain
// timeout, a PDB holds the node in Drain; abort must stop that drain at
// once (not after its timeout, and not never), uncordon the node and leave
// the guarded pod where it was.
func TestAbortReachesAStuckDrain(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e := newEnv(t, nodes, 1)
	guarded := e.c.Nodes[0].Name
	e.blockDrain(guarded)
	pods, err := e.c.Client.CoreV1().Pods("pdb").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("guarded pods: %v %d", err, len(pods.Items))
	}
	guardedUID := pods.Items[0].UID
	e.runInProcess("solo")
	e.upgrade("1.28.1")
	e.apply(rollout("stuck", func(s *v1alpha1.NodeRolloutSpec) {
		s.CanaryNodes = []string{guarded}
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAlways, PDBBlocked: v1alpha1.PDBWait, Timeout: &v1alpha1.Duration{Duration: 30 * time.Minute}}
	}))
	if n := e.waitStep("stuck", v1alpha1.NodeDrain); n != guarded {
		t.Fatalf("node %s in Drain, want the canary %s", n, guarded)
	}
	time.Sleep(2 * time.Second) // the eviction is refused and retried meanwhile
	if uns := e.unschedulable(); !uns[guarded] {
		t.Fatalf("%s not cordoned while draining", guarded)
	}
	e.patch("stuck", `{"spec":{"abort":true}}`)
	nr := e.waitPhase("stuck", time.Minute, v1alpha1.PhaseAborted)
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left after abort: %v", uns)
	}
	for _, n := range nr.Status.Nodes {
		if n.State != v1alpha1.NodePending {
			t.Errorf("node %s %s after abort, want Pending (nothing swapped)", n.Name, n.State)
		}
	}
	pods, err = e.c.Client.CoreV1().Pods("pdb").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].UID != guardedUID || pods.Items[0].DeletionTimestamp != nil {
		t.Errorf("the PDB-guarded pod was disturbed: %v %+v", err, pods.Items)
	}
}
