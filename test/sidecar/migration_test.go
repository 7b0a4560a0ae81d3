package sidecar

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestMigrationWavesCrashAndResume moves 30 namespaces in 3 tiers from 1-27
// to 1-28 with the default waves (canary, 5%, 30%, 100%) at 2 pods/s (at
// 10 pods/s, which does not bind, 42 pods were recreated within 10 s here).
// The controller runs as a child process and is killed with SIGKILL in the
// middle of the 30% wave (some of its Deployments restarted, some not); a new
// process finishes. Checked: every pod ends on
// 1.28.1; no workload is restarted twice (one new ReplicaSet or
// ControllerRevision each); pod creations stay within the rate limit; no app
// ever has fewer Ready pods than its PDB allows.
func TestMigrationWavesCrashAndResume(t *testing.T) {
	e := start(t, 6, "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client
	const rate = 2
	floor := map[string]int{}
	var nss []string
	for i := 0; i < 30; i++ {
		ns := fmt.Sprintf("app-%02d", i)
		tier := fmt.Sprint(1 + i%3)
		apps := []app{{name: "web", replicas: 4}}
		floor[ns+"/web"] = 3
		if i%10 == 9 {
			apps = append(apps, app{name: "db", replicas: 2, sts: true})
			floor[ns+"/db"] = 1
		}
		e.namespace(ns, map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: tier}, apps...)
		nss = append(nss, ns)
	}
	for _, ns := range nss {
		want := 4
		if ns[len(ns)-1] == '9' {
			want = 6
		}
		e.allOn(3*time.Minute, "1.27.3", want, ns)
	}
	rec := watchPods(t, ctx, cs, "app-", floor)

	before := podUIDs(t, ctx, cs, "app-")
	kill := e.controllerProcess("controller-1")
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "to-1-28"},
		Spec:       v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: rate}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Kill the controller mid-wave: the 30% wave has a namespace restarting.
	testkit.WaitFor(t, 5*time.Minute, "the 30% wave mid-restart", func() (bool, error) {
		rm := e.migration("to-1-28")
		if rm.Status.Phase == v1alpha1.MigrationRefused {
			t.Fatalf("refused: %s", rm.Status.Reason)
		}
		if rm.Status.CurrentWave != 2 {
			return false, fmt.Errorf("wave %d phase %s", rm.Status.CurrentWave, rm.Status.Phase)
		}
		// Mid-wave: some of the wave's workloads restarted, some not yet.
		stamped, total := 0, 0
		for _, ns := range rm.Status.Waves[2].Namespaces {
			d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			total++
			if d.Spec.Template.Annotations[revisions.AnnotationRestartedAt] != "" {
				stamped++
			}
		}
		return stamped > 0 && stamped < total, fmt.Errorf("wave 2: %d of %d deployments restarted", stamped, total)
	})
	kill()
	killed := e.migration("to-1-28")
	phases := map[v1alpha1.NamespacePhase]int{}
	for _, ns := range killed.Status.Namespaces {
		if ns.Wave == 2 {
			phases[ns.Phase]++
		}
	}
	t.Logf("controller killed in wave %d, its namespaces by phase: %v", killed.Status.CurrentWave, phases)
	time.Sleep(2 * time.Second)
	e.controllerProcess("controller-2")

	rm := e.waitPhase("to-1-28", 10*time.Minute, v1alpha1.MigrationSucceeded, v1alpha1.MigrationHalted, v1alpha1.MigrationRefused)
	if rm.Status.Phase != v1alpha1.MigrationSucceeded {
		t.Fatalf("migration ended %s: %s", rm.Status.Phase, rm.Status.Reason)
	}
	sizes := []int{}
	for _, w := range rm.Status.Waves {
		sizes = append(sizes, len(w.Namespaces))
	}
	if fmt.Sprint(sizes) != "[1 1 7 21]" {
		t.Fatalf("wave sizes %v", sizes)
	}

	// Every pod on the new proxy, per an independent inventory.
	inv, err := inventory.Observe(ctx, cs, inventory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pods := 0
	for _, p := range inv.Pods {
		if p.Mode == inventory.ModeSidecar && p.Namespace[:4] == "app-" {
			pods++
			if p.Version != "1.28.1" || p.Revision != "1-28" {
				t.Errorf("%s/%s still on %s (%s)", p.Namespace, p.Name, p.Version, p.Revision)
			}
		}
	}
	if pods != 30*4+3*2 {
		t.Fatalf("%d sidecar pods, want %d", pods, 30*4+3*2)
	}

	// No namespace restarted twice: one restart per workload = exactly one new
	// ReplicaSet (Deployment) or ControllerRevision (StatefulSet).
	for _, ns := range nss {
		rss, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rss.Items) != 2 {
			t.Errorf("%s: %d ReplicaSets, want 2 (restarted exactly once)", ns, len(rss.Items))
		}
		if ns[len(ns)-1] == '9' {
			crs, err := cs.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(crs.Items) != 2 {
				t.Errorf("%s: %d ControllerRevisions, want 2", ns, len(crs.Items))
			}
		}
	}
	for _, ns := range rm.Status.Namespaces {
		if ns.Generation != 1 || ns.Phase != v1alpha1.NamespaceReady {
			t.Errorf("namespace %s: generation %d phase %s", ns.Name, ns.Generation, ns.Phase)
		}
	}

	// Restart rate from pod creation timestamps (1 s resolution): over any
	// window W at most rate*W + the bucket (rate) + one workload (4) + rate for rounding.
	created := rec.createdExcept(before)
	if len(created) != pods {
		t.Errorf("%d pods created since the migration started, want %d (one per pod)", len(created), pods)
	}
	for _, w := range []time.Duration{time.Second, 5 * time.Second, 10 * time.Second} {
		limit := rate*int(w/time.Second) + rate + 4 + rate
		if got := maxInWindow(created, w); got > limit {
			t.Errorf("%d pods created within %s, limit %d", got, w, limit)
		} else {
			t.Logf("most pods created within %s: %d (limit %d at %d pods/s)", w, got, limit, rate)
		}
	}
	span := created[len(created)-1].Sub(created[0]).Seconds()
	t.Logf("FIGURE: %d pods restarted over %.0f s: %.1f pods/s achieved (limit %d/s); migration took %s",
		len(created), span, float64(len(created))/max(span, 1), rate, rm.Status.WaveStartedAt.Sub(rm.Status.StartedAt.Time).Round(time.Second))

	if v := rec.violations(); len(v) > 0 {
		t.Fatalf("PDB violated %d times, first: %s", len(v), v[0])
	}
	t.Logf("PDB floors held for %d apps", len(floor))
}
