package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/injector"
	"github.com/nodewise/nodewise/test/testkit"
)

// liveSidecars is a live cluster whose sample sidecar namespaces (catalog
// and ledger, on the default tag) run injected pods: each with its own proxy
// stand-in intercepting the app's traffic, of the revision's version, and
// calling its namespace's peers. Revision 1-28 is installed beside 1-27 at
// version to, and a RevisionMigration controller runs with the spec's gates
// and an AgentGate over the real eBPF agents, as cmd/orchestrator wires them.
func liveSidecars(t *testing.T, to string) (*liveEnv, v1alpha1.RevisionMigrationInterface) {
	t.Helper()
	inj, err := injector.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inj.Close)
	inj.SetRevision("1-27", "1.27.3")
	inj.SetRevision("1-28", to)
	withInjector := func(o *cluster.IstioOptions) { o.InjectorURL, o.CABundle = inj.URL, inj.CABundle }
	e := newLiveEnvWired(t, 3, testAgents(t), withInjector)
	ctx := context.Background()
	opts := cluster.IstioOptions{Version: to, UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType, SkipSamples: true}
	withInjector(&opts)
	if err := cluster.InstallIstio(ctx, e.c.Client, opts); err != nil {
		t.Fatal(err)
	}
	log := testLog(t)
	if log == nil {
		log = zap.NewNop()
	}
	mc, stop, err := startMigrations(ctx, e.c, testkit.CRDDir(), agentConfig(e.agents), log, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	time.Sleep(waveBaseline + 2*time.Second) // the first wave's baseline
	return e, mc
}

// sidecarMigration moves catalog first (the canary wave), then ledger.
func sidecarMigration(name string) *v1alpha1.RevisionMigration {
	return canaryFirst(name, "1-27", "1-28", "", "catalog")
}

// waitMigration waits until the migration reaches one of phases.
func waitMigration(t *testing.T, mc v1alpha1.RevisionMigrationInterface, name string, timeout time.Duration, phases ...v1alpha1.MigrationPhase) *v1alpha1.RevisionMigration {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rm, err := mc.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range phases {
			if rm.Status.Phase == p {
				return rm
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("migration %s: %s (%s) after %s, want %v", name, rm.Status.Phase, rm.Status.Reason, timeout, phases)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// onlyProxy fails the test unless every running pod of ns (two of them)
// has a sidecar of version.
func onlyProxy(t *testing.T, e *liveEnv, ns, version, when string) {
	t.Helper()
	got, err := proxyVersions(context.Background(), e.c, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[version] != 2 {
		t.Errorf("%s %s runs sidecars %v, want two of %s", ns, when, got, injector.ProxyImage(version))
	}
}

// TestLiveSidecarRstHaltsAtCanaryWave: on the live data plane, a migration
// to a revision whose sidecar resets a quarter of its connections halts at
// its canary wave on the eBPF agents' evidence alone (no Prometheus gate),
// and the namespace of the next wave keeps the old proxy.
func TestLiveSidecarRstHaltsAtCanaryWave(t *testing.T) {
	t.Parallel()
	e, mc := liveSidecars(t, "1.28.1-rst")
	for _, ns := range []string{"catalog", "ledger"} {
		onlyProxy(t, e, ns, "1.27.3", "before the migration")
	}
	if t.Failed() {
		t.FailNow()
	}
	if _, err := mc.Create(context.Background(), sidecarMigration("rst"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rm := waitMigration(t, mc, "rst", 3*time.Minute, v1alpha1.MigrationHalted, v1alpha1.MigrationSucceeded)
	t.Logf("%s: %s", rm.Status.Phase, rm.Status.Reason)
	if rm.Status.Phase != v1alpha1.MigrationHalted || !strings.Contains(rm.Status.Reason, "wave canary") ||
		!strings.Contains(rm.Status.Reason, "migrated pods") || !strings.Contains(rm.Status.Reason, "resets") {
		t.Fatalf("migration %s: %q; want Halted at wave canary on the agents' reset evidence", rm.Status.Phase, rm.Status.Reason)
	}
	onlyProxy(t, e, "catalog", "1.28.1-rst", "after its canary wave")
	onlyProxy(t, e, "ledger", "1.27.3", "after the halt (untouched)")
}

// TestLiveSidecarHealthyMigrationPasses: the same migration to a healthy
// revision completes, every wave judged Pass by the agents with tests run,
// and every pod of both namespaces runs the new proxy.
func TestLiveSidecarHealthyMigrationPasses(t *testing.T) {
	e, mc := liveSidecars(t, "1.28.1")
	if _, err := mc.Create(context.Background(), sidecarMigration("healthy"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rm := waitMigration(t, mc, "healthy", 3*time.Minute, v1alpha1.MigrationHalted, v1alpha1.MigrationSucceeded)
	t.Logf("%s: %s", rm.Status.Phase, rm.Status.Reason)
	if rm.Status.Phase != v1alpha1.MigrationSucceeded {
		t.Fatalf("healthy migration %s: %q", rm.Status.Phase, rm.Status.Reason)
	}
	for _, w := range rm.Status.Waves {
		j := w.Judgement
		if j == nil {
			t.Errorf("wave %s was never judged", w.Name)
			continue
		}
		tested := 0
		for _, r := range j.Rows {
			if r.P != "" {
				tested++
			}
		}
		t.Logf("wave %s: %s, %d rows, %d tested, %v", w.Name, j.Outcome, len(j.Rows), tested, j.Reasons)
		if j.Outcome != "Pass" || tested == 0 {
			t.Errorf("wave %s: %s with %d of %d rows tested; want Pass on tested evidence", w.Name, j.Outcome, tested, len(j.Rows))
		}
	}
	for _, ns := range []string{"catalog", "ledger"} {
		onlyProxy(t, e, ns, "1.28.1", "after the migration")
	}
}
