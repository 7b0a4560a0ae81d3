package e2e

import (
	"context"
	"testing"
	"time"

	dtomodel "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator"
)

type dto = dtomodel.MetricFamily

// writes sums the orchestrator's write requests (create/update/patch/delete),
// leaving out its own Lease.
func writes(fams map[string]*dto) float64 {
	var n float64
	for _, m := range fams["nodewise_api_requests_total"].GetMetric() {
		l := labelMap(m.GetLabel())
		if l["resource"] == "leases" {
			continue
		}
		switch l["verb"] {
		case "create", "update", "patch", "delete":
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// TestOnlyLeaderWrites runs two replicas: only the Lease holder writes, and
// killing it hands over within the lease duration.
func TestOnlyLeaderWrites(t *testing.T) {
	const nodes = 6
	e := newEnv(t, nodes, 2)
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := e.startProcess("replica-a", addrA)
	waitHolder(t, e, "replica-a")
	b := e.startProcess("replica-b", addrB)
	_ = b
	e.upgrade("1.28.1")
	e.apply(rollout("leader", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = 1, 1
		s.Soak = &v1alpha1.Duration{Duration: 2 * time.Second}
	}))
	e.waitStep("leader", v1alpha1.NodeSoak)
	if w := writes(scrape(t, addrB)); w != 0 {
		t.Fatalf("standby replica made %v write requests", w)
	}
	if w := writes(scrape(t, addrA)); w == 0 {
		t.Fatal("leader made no write requests: the check cannot tell them apart")
	}
	old, err := e.c.Client.CoordinationV1().Leases("default").Get(context.Background(), orchestrator.LeaseName, metav1.GetOptions{})
	if err != nil || old.Spec.RenewTime == nil {
		t.Fatalf("reading the lease: %v", err)
	}
	a.kill()
	lease := waitHolder(t, e, "replica-b")
	if lease.Spec.AcquireTime == nil {
		t.Fatal("lease has no acquire time")
	}
	// Handover, from the Lease's own timestamps: the standby takes over once the
	// last renewal is a lease duration (4 s) old, give or take a retry period.
	gap := lease.Spec.AcquireTime.Sub(old.Spec.RenewTime.Time)
	t.Logf("handover: last renewal by replica-a → acquisition by replica-b = %s (lease 4s, retry 500ms)", gap)
	if gap > 4*time.Second+2*500*time.Millisecond+time.Second {
		t.Errorf("handover took %s after the last renewal, more than the lease duration", gap)
	}
	e.waitPhase("leader", 4*time.Minute, v1alpha1.PhaseCompleted)
	e.assertAllOnNewest(nodes)
	if w := writes(scrape(t, addrB)); w == 0 {
		t.Fatal("new leader made no writes")
	}
}

type leaseView struct {
	Spec struct {
		AcquireTime *metav1.MicroTime
	}
}

func waitHolder(t testing.TB, e *env, id string) leaseView {
	t.Helper()
	var lv leaseView
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := e.c.Client.CoordinationV1().Leases("default").Get(ctx, orchestrator.LeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		lv.Spec.AcquireTime = l.Spec.AcquireTime
		return *l.Spec.HolderIdentity == id, nil
	})
	if err != nil {
		t.Fatalf("%s never held the lease", id)
	}
	t.Logf("%s holds the lease after %s", id, time.Since(start).Round(100*time.Millisecond))
	return lv
}
