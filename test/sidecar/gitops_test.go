package sidecar

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/test/gitops"
)

// TestGitOpsHealth: Argo CD (the health check as installed from
// deploy/argocd/argocd-cm.yaml into an argocd-cm on the API server) and
// Flux's kstatus read RevisionMigrations served by the API server alike:
// created before the controller runs (Progressing, InProgress), Succeeded
// (Healthy, Current), Paused (Suspended, InProgress), Aborted (Degraded,
// Failed), Halted by its gate and Refused (Degraded, Failed, with the reason).
func TestGitOpsHealth(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx := e.ctx
	read := gitops.NewChecker(t, ctx, e.c.Client, e.c.Config, "RevisionMigration").Expect
	create := func(name string, spec v1alpha1.RevisionMigrationSpec) {
		t.Helper()
		spec.RateLimit = v1alpha1.RestartRateLimit{PodsPerSecond: 5}
		if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.namespace("g-1", map[string]string{"istio.io/rev": "1-27"}, app{name: "web", replicas: 1})
	e.allOn(2*time.Minute, "1.27.3", 1, "g-1")

	create("forth", v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28"})
	read("forth", "Progressing", status.InProgressStatus) // no controller has seen it yet
	e.controller(revisions.GateFunc(func(_ context.Context, in revisions.WaveInput) (health.Verdict, error) {
		if in.Migration == "halts" {
			return health.Verdict{Outcome: health.Fail, Reasons: []string{"test gate"}}, nil
		}
		return health.Verdict{Outcome: health.Pass}, nil
	}))
	e.waitPhase("forth", 2*time.Minute, v1alpha1.MigrationSucceeded)
	read("forth", "Healthy", status.CurrentStatus)

	// A namespace still on 1-27, moved through another tag (g-1 uses canary).
	e.namespace("g-2", map[string]string{"istio.io/rev": "1-27"}, app{name: "web", replicas: 1})
	e.allOn(2*time.Minute, "1.27.3", 1, "g-2")
	create("paused", v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Tag: "next", Paused: true})
	e.waitPhase("paused", time.Minute, v1alpha1.MigrationPaused)
	read("paused", "Suspended", status.InProgressStatus)
	e.abort("paused", v1alpha1.AbortAll)
	e.waitPhase("paused", time.Minute, v1alpha1.MigrationAborted)
	read("paused", "Degraded", status.FailedStatus)

	create("halts", v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Tag: "next"})
	rm := e.waitPhase("halts", 2*time.Minute, v1alpha1.MigrationHalted)
	rd := read("halts", "Degraded", status.FailedStatus)
	if rd.KstatusMessage != rm.Status.Reason || !strings.Contains(rd.Argo.Message, rm.Status.Reason) {
		t.Errorf("halted: Argo CD says %q, kstatus %q; want both to give the reason %q", rd.Argo.Message, rd.KstatusMessage, rm.Status.Reason)
	}

	create("refused", v1alpha1.RevisionMigrationSpec{From: "1-99", To: "1-28", Tag: "other"})
	e.waitPhase("refused", time.Minute, v1alpha1.MigrationRefused)
	read("refused", "Degraded", status.FailedStatus)
}
