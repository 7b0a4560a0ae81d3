package demo

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/dataplane"
	"github.com/nodewise/nodewise/test/testkit"
)

// benchNodes is the cluster size of each disruption run.
const benchNodes = 4

// disruptionRun is one row of the disruption table.
type disruptionRun struct {
	name   string
	swap   string // surge, replace or native
	drain  v1alpha1.DrainPolicy
	truth  dataplane.Truth
	wall   time.Duration
	agents agreement // the node agents' per-pod resets vs the apps' own
	judge  string    // the judge's verdict on each node
	gate   string    // the rollout's end: Completed, or Halted with its reason ("-": no rollout)
}

// benchPreStopEnv sets the apps' preStop delay (dataplane.Traffic.PreStop):
// a Go duration, or -1s for the rig's old abrupt apps.
const benchPreStopEnv = "NODEWISE_BENCH_PRESTOP"

// BenchmarkDisruption runs the same cluster and traffic six times, with the
// real 30 s ztunnel grace period (drain deadline 25 s) and streams that live
// 40–60 s: (a) Istio's default DaemonSet RollingUpdate (maxSurge 1,
// maxUnavailable 0); nodewise swapping ztunnel break-before-make (replace)
// with drain (b) never, (c) always, (d) auto; nodewise's default
// make-before-break (surge) with drain (e) never, (f) auto. It prints the
// clients' own ground truth for each (failed requests split into those sent
// to pods being evicted and the rest, the swap's), then what the node agents
// counted per pod against the apps' own count of resets, the judge's verdict
// on each node, how each rollout ended (a gate that fails halts it, the
// swap window's failed connects among its reasons: the figures of a halted
// run are up to its halt), and last one line per run. The apps shut down as
// well-behaved Kubernetes apps do (a 2 s preStop once their endpoints are
// gone, then the requests in flight are answered); NODEWISE_BENCH_PRESTOP=-1s
// runs the rig's old abrupt apps instead. Run it with `make bench-disruption`.
func BenchmarkDisruption(b *testing.B) {
	testkit.RequireNetns(b)
	var preStop time.Duration
	if v := os.Getenv(benchPreStopEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("%s=%q: %v", benchPreStopEnv, v, err)
		}
		preStop = d
	}
	var runs []disruptionRun
	for i := 0; i < b.N; i++ {
		for _, r := range []struct {
			name, swap string
			drain      v1alpha1.DrainPolicy
		}{
			{"(a) DaemonSet RollingUpdate maxSurge 1", "native", v1alpha1.DrainNever},
			{"(b) nodewise replace, drain never", "replace", v1alpha1.DrainNever},
			{"(c) nodewise replace, drain always", "replace", v1alpha1.DrainAlways},
			{"(d) nodewise replace, drain auto", "replace", v1alpha1.DrainAuto},
			{"(e) nodewise surge, drain never", "surge", v1alpha1.DrainNever},
			{"(f) nodewise surge, drain auto", "surge", v1alpha1.DrainAuto},
		} {
			runs = append(runs, benchRun(b, r.name, r.swap, r.drain, preStop))
		}
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "run\tstreams reset\trequests failed\tby the swap\tto evicted pods\tstreams closed gracefully\tstreams\trequests\twall time\t\n")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.name, r.truth.StreamsReset, r.truth.RequestsFailed,
			r.truth.RequestsFailed-r.truth.RequestsFailedEvicted, r.truth.RequestsFailedEvicted,
			r.truth.StreamsGraceful, r.truth.Streams, r.truth.Requests, r.wall.Round(time.Second))
	}
	_ = tw.Flush()
	apps := "well-behaved apps (preStop " + dataplane.Traffic{PreStop: preStop}.WithDefaults().PreStop.String() + ", then in-flight requests answered)"
	if preStop < 0 {
		apps = "the rig's old abrupt apps (no preStop, in-flight requests dropped)"
	}
	fmt.Printf("\nDisruption of a ztunnel upgrade 1.27.3 → 1.28.1 on %d simulated nodes, %s (ground truth from the clients):\n%s", benchNodes, apps, sb.String())

	sb.Reset()
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run\tresets received by apps: agents (Σ pods)\tground truth (Σ pods)\tper pod\tjudge verdict per node\n")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", r.name, r.agents.agent, r.agents.truth, r.agents, r.judge)
	}
	_ = tw.Flush()
	fmt.Printf("\nWhat the node agents (eBPF, app side, per pod) and the judge saw, against the apps' own count of resets received\n(connects refused, requests and streams reset, served connections reset), each pod from the first to the last reading\nthat saw it (every 0.5 s):\n%s\n", sb.String())
	fmt.Printf("How each rollout ended (a Halted run's figures are up to its halt):\n")
	for _, r := range runs {
		fmt.Printf("  %s: %s\n", r.name, r.gate)
	}
	fmt.Println()
	for _, r := range runs {
		fmt.Printf("disruption run=%s swap=%s drain=%s streams_reset=%d requests_failed=%d requests=%d streams=%d wall_s=%d gate=%s\n",
			runSlug(r), r.swap, r.drain, r.truth.StreamsReset, r.truth.RequestsFailed, r.truth.Requests, r.truth.Streams, int(r.wall.Round(time.Second)/time.Second),
			strings.SplitN(r.gate, ":", 2)[0])
	}
}

// runSlug names a run in the one-line summary: native, replace-never, … .
func runSlug(r disruptionRun) string {
	if r.swap == "native" {
		return "native"
	}
	return r.swap + "-" + string(r.drain)
}

// benchRun starts a fresh cluster on the live data plane, lets traffic
// settle, upgrades the ztunnel and istio-cni with the given method, and
// returns the ground truth seen from the start of the upgrade until every
// old stand-in has exited.
func benchRun(b *testing.B, name, swap string, policy v1alpha1.DrainPolicy, preStop time.Duration) disruptionRun {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dp, err := dataplane.New(dataplane.Config{StandinArgv: []string{exe, "-test.run=^$"}, Traffic: dataplane.Traffic{PreStop: preStop}})
	if err != nil {
		b.Fatal(err)
	}
	defer dp.Close()
	ctx := context.Background()
	c, err := cluster.Up(ctx, b.TempDir()+"/sim", cluster.Options{Nodes: benchNodes, Zones: 2, ReadyDelay: 300 * time.Millisecond, Runtime: dp})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Stop()
	dp.UseCluster(c)
	agents, err := startAgents(ctx, dp, c, b.TempDir(), testkit.FreePort(b, c.Nodes[0].IP), nil)
	must(b, err)
	defer agents.Close()
	strategy := appsv1.OnDeleteDaemonSetStrategyType
	if swap == "native" {
		strategy = appsv1.RollingUpdateDaemonSetStrategyType
	}
	cluster.InstallCRDs(b, c, testkit.CRD(testkit.NodeRolloutsCRD))
	must(b, cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.27.3", UpdateStrategy: strategy}))
	must(b, during(name, "waiting for the DaemonSets", waitDaemonSets(ctx, c, benchNodes)))
	must(b, during(name, "waiting for the sample apps", waitSamples(ctx, c)))
	time.Sleep(10 * time.Second) // streams open on every pod
	_, before := dp.Truth()
	tally := startTally(agents, dp, 500*time.Millisecond)
	start := time.Now()
	var judgedRollout *v1alpha1.NodeRollout
	var decisions map[string]string
	must(b, cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.28.1", UpdateStrategy: strategy, SkipSamples: true}))
	if swap == "native" {
		must(b, during(name, "waiting for the native rollout", waitUpgraded(ctx, c)))
	} else {
		must(b, during(name, "waiting for the DaemonSet controller", waitTemplateObserved(ctx, c, cluster.CNIName, cluster.ZtunnelName)))
		stop, err := startOrchestrator(ctx, c, nil, agentConfig(agents), model.SwapKind(swap))
		must(b, err)
		defer stop()
		nwc, err := v1alpha1.NewForConfig(c.Config)
		must(b, err)
		rc := nwc.NodeRollouts()
		// Judged like the demo: a drained node has no traffic left in its
		// soak, which passes; a node swapped in place is judged on its pods.
		nr := demoGates(judged(healthyRollout("bench", c.Nodes[0].Name), 5*time.Second, 5*time.Second, v1alpha1.InconclusivePass))
		nr.Spec.Drain.Policy = policy
		// The benchmark compares the agents' per-pod counts with the apps'
		// own and runs no probe, so probe evidence is not required.
		nr.Spec.Gates.Probe = v1alpha1.ProbeOptional
		got, err := runRollout(ctx, rc, nr, newView(nopWriter{}, false))
		must(b, during(name, "running the rollout", err))
		// A gate that fails halts the rollout at that node: the swap
		// window is judged too, so a hand-over that breaks connections
		// halts at the canary. The figures are then the canary's alone.
		if p := got.Status.Phase; p != v1alpha1.PhaseCompleted && p != v1alpha1.PhaseHalted {
			b.Fatalf("%s: rollout %s: %s", name, got.Status.Phase, got.Status.HaltReason)
		}
		judgedRollout = got
		decisions = drainDecisions(ctx, c)
	}
	if judgedRollout == nil || judgedRollout.Status.Phase == v1alpha1.PhaseCompleted {
		must(b, during(name, "waiting for every old ztunnel to exit", waitUpgraded(ctx, c)))
	}
	wall := time.Since(start)
	time.Sleep(2 * time.Second) // the last resets reach the clients
	perPod := tally.finish()
	_, after := dp.Truth()
	r := disruptionRun{name: name, swap: swap, drain: policy, truth: after.Sub(before), wall: wall,
		agents: compareAgents(perPod), judge: verdicts(judgedRollout, decisions), gate: "-"}
	if judgedRollout != nil {
		r.gate = string(judgedRollout.Status.Phase)
		if judgedRollout.Status.Phase == v1alpha1.PhaseHalted {
			r.gate += ": " + judgedRollout.Status.HaltReason
		}
	}
	return r
}

// waitUpgraded waits until every node runs a Ready 1.28.1 ztunnel and no
// old ztunnel pod is left (the old stand-ins have drained and exited).
func waitUpgraded(ctx context.Context, c *cluster.Cluster) error {
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(cluster.IstioNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=ztunnel"})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, p := range pods.Items {
			if !strings.HasSuffix(p.Spec.Containers[0].Image, ":1.28.1") {
				return false, nil
			}
			if p.DeletionTimestamp == nil && podutils.IsPodReady(&p) {
				ready++
			}
		}
		return ready == benchNodes && len(pods.Items) == benchNodes, nil
	})
}

// during says which run and what it was doing when err happened.
func during(run, what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %s: %w", run, what, err)
	}
	return nil
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
