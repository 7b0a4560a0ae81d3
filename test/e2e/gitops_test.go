package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/gitops"
)

// TestGitOpsHealth: Argo CD (the health check as installed from
// deploy/argocd/argocd-cm.yaml into an argocd-cm on the API server) and
// Flux's kstatus read NodeRollouts served by the API server alike, through
// a rollout's life: created before any orchestrator runs (Progressing,
// InProgress: the CRD defaults observedGeneration to 0), Completed (Healthy,
// Current), Paused (Suspended, InProgress), Aborted (Degraded, Failed), with a
// selector that matches no node (Failed: Degraded, Failed) and Halted at a
// ztunnel that never gets Ready (Degraded, Failed, with the halt reason).
func TestGitOpsHealth(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e := newEnv(t, nodes, 1)
	ctx := context.Background()
	read := gitops.NewChecker(t, ctx, e.c.Client, e.c.Config, "NodeRollout").Expect
	one := func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	}

	e.upgrade("1.28.1")
	e.apply(rollout("done", one))
	read("done", "Progressing", status.InProgressStatus) // no orchestrator has seen it yet
	e.runInProcess("solo")
	e.waitPhase("done", 2*time.Minute, v1alpha1.PhaseCompleted)
	read("done", "Healthy", status.CurrentStatus)

	e.upgrade("1.28.2")
	e.apply(rollout("paused", func(s *v1alpha1.NodeRolloutSpec) { one(s); s.Paused = true }))
	e.waitPhase("paused", time.Minute, v1alpha1.PhasePaused)
	read("paused", "Suspended", status.InProgressStatus)
	if _, err := e.rollouts.Patch(ctx, "paused", types.MergePatchType, []byte(`{"spec":{"abort":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPhase("paused", time.Minute, v1alpha1.PhaseAborted)
	read("paused", "Degraded", status.FailedStatus)

	e.apply(rollout("nowhere", func(s *v1alpha1.NodeRolloutSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "none"}}
	}))
	e.waitPhase("nowhere", time.Minute, v1alpha1.PhaseFailed)
	read("nowhere", "Degraded", status.FailedStatus)

	e.setImageTag(cluster.ZtunnelName, "1.28.2"+cluster.TagNeverReady)
	e.apply(rollout("halted", func(s *v1alpha1.NodeRolloutSpec) {
		one(s)
		s.SwapTimeout = &v1alpha1.Duration{Duration: 3 * time.Second}
	}))
	nr := e.waitPhase("halted", 2*time.Minute, v1alpha1.PhaseHalted)
	rd := read("halted", "Degraded", status.FailedStatus)
	if nr.Status.HaltReason == "" || rd.KstatusMessage != nr.Status.HaltReason || !strings.Contains(rd.Argo.Message, nr.Status.HaltReason) {
		t.Errorf("halted: Argo CD says %q, kstatus %q; want both to give the halt reason %q", rd.Argo.Message, rd.KstatusMessage, nr.Status.HaltReason)
	}
}
