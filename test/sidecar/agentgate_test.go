package sidecar

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/test/testkit"
)

// agentWaves starts 4 namespaces (tiers 1..4, 2 pods each) on from's proxy,
// an AgentGate over fake node agents and a controller, then the migration.
func agentWaves(t *testing.T, to string) (*env, *fakeAgents, []string) {
	e := start(t, 3, "1.27.3", to)
	var nss []string
	for i := 1; i <= 4; i++ {
		ns := fmt.Sprintf("ag-%d", i)
		e.namespace(ns, map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: fmt.Sprint(i)}, app{name: "web", replicas: 2})
		nss = append(nss, ns)
	}
	e.allOn(2*time.Minute, "1.27.3", 2, nss...)
	agents := newFakeAgents(e.c.Client)
	gate := e.agentGate(agents)
	// As cmd/orchestrator wires it: the spec's gates and the agents' together.
	e.controller(revisions.Gates(revisions.SpecGates(remote.AddressPolicy{}, zaptest.NewLogger(t)), gate))
	if _, err := e.mc.Create(e.ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "ag"},
		Spec:       v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e, agents, nss
}

// agentGate is an AgentGate over agents (3 s soak, 5 s baseline, sampled
// every second) that samples every node from 3 s before it returns, as a
// controller tracking a migration's nodes from its start would.
func (e *env) agentGate(agents *fakeAgents) *revisions.AgentGate {
	e.t.Helper()
	gate, err := revisions.NewAgentGate(revisions.AgentGateConfig{Source: agents, Soak: 3 * time.Second, Baseline: 5 * time.Second, Every: time.Second, Log: zaptest.NewLogger(e.t).Named("gate")})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	e.t.Cleanup(cancel)
	go func() { _ = gate.Run(ctx) }()
	nodes, err := e.c.Client.CoreV1().Nodes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	gate.Track(e.ctx, names)
	time.Sleep(3 * time.Second)
	return gate
}

// TestAgentGateHaltsFaultyCanary: a 1-28 whose sidecar resets 30% of its
// connections halts at the canary wave on the node agents' evidence alone
// (no Prometheus gate configured), with a reason a person reads and the
// wave's table in status. Nothing beyond the canary moved.
func TestAgentGateHaltsFaultyCanary(t *testing.T) {
	e, _, nss := agentWaves(t, "1.28.1-rst")
	untouched := podUIDs(t, e.ctx, e.c.Client, "ag-")
	rm := e.waitPhase("ag", 3*time.Minute, v1alpha1.MigrationHalted, v1alpha1.MigrationSucceeded)
	t.Logf("halted: %s", rm.Status.Reason)
	if rm.Status.Phase != v1alpha1.MigrationHalted || rm.Status.CurrentWave != 0 {
		t.Fatalf("migration %s at wave %d, want Halted at the canary: %s", rm.Status.Phase, rm.Status.CurrentWave, rm.Status.Reason)
	}
	if !strings.Contains(rm.Status.Reason, "migrated pods") || !strings.Contains(rm.Status.Reason, "resetsReceived") {
		t.Errorf("halt reason %q does not name the migrated pods' resets", rm.Status.Reason)
	}
	j := rm.Status.Waves[0].Judgement
	if j == nil || j.Outcome != "Fail" {
		t.Fatalf("canary judgement %+v", j)
	}
	regressed := 0
	for _, r := range j.Rows {
		t.Logf("row: %s %s %s -> %s %s %v %s", r.Pod, r.Metric, r.Before, r.After, r.P, r.Regressed, r.Note)
		if r.Regressed {
			regressed++
		}
	}
	if regressed == 0 {
		t.Errorf("no regressed row in the canary's table")
	}
	canary := rm.Status.Waves[0].Namespaces[0]
	for _, ns := range nss {
		if ns == canary {
			continue
		}
		for uid := range podUIDs(t, e.ctx, e.c.Client, ns) {
			if !untouched[uid] {
				t.Fatalf("%s moved beyond the halted canary (pod %s is new)", ns, uid)
			}
		}
	}
}

// TestAgentGatePassesThroughClusterWideChange: a healthy 1-28 completes with
// every wave judged Pass, although during the second wave every pod of the
// cluster, migrated or not, starts resetting 20 times more and connecting 4
// times slower: the control group shows the change too.
func TestAgentGatePassesThroughClusterWideChange(t *testing.T) {
	e, agents, _ := agentWaves(t, "1.28.1")
	var surgedAt time.Time
	testkit.WaitFor(t, 3*time.Minute, "the second wave", func() (bool, error) {
		rm := e.migration("ag")
		if rm.Status.Phase == v1alpha1.MigrationHalted {
			t.Fatalf("halted: %s", rm.Status.Reason)
		}
		return rm.Status.CurrentWave >= 1, fmt.Errorf("wave %d %s", rm.Status.CurrentWave, rm.Status.Reason)
	})
	agents.setSurge(true)
	surgedAt = time.Now()
	rm := e.waitPhase("ag", 3*time.Minute, v1alpha1.MigrationSucceeded, v1alpha1.MigrationHalted)
	if rm.Status.Phase != v1alpha1.MigrationSucceeded {
		t.Fatalf("migration %s: %s", rm.Status.Phase, rm.Status.Reason)
	}
	for i, w := range rm.Status.Waves {
		if w.Judgement == nil || w.Judgement.Outcome != "Pass" {
			t.Fatalf("wave %s judgement %+v", w.Name, w.Judgement)
		}
		at, err := time.Parse(time.RFC3339, w.Judgement.JudgedAt)
		if err != nil {
			t.Fatal(err)
		}
		tested := 0
		for _, r := range w.Judgement.Rows {
			if r.P != "" {
				tested++
			}
		}
		t.Logf("wave %d %s judged %s (surge from %s): %d rows, %d tested", i, w.Name, at.Format(time.TimeOnly), surgedAt.Format(time.TimeOnly), len(w.Judgement.Rows), tested)
		if tested == 0 {
			t.Errorf("wave %s passed without a single test", w.Name)
		}
	}
	if last, _ := time.Parse(time.RFC3339, rm.Status.Waves[len(rm.Status.Waves)-1].Judgement.JudgedAt); !last.After(surgedAt) {
		t.Fatalf("no wave was judged during the surge")
	}
	e.allOn(time.Minute, "1.28.1", 2, "ag-1", "ag-2", "ag-3", "ag-4")
}
