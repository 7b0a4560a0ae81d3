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
	"github.com/nodewise/nodewise/test/cluster"
	"github.com/nodewise/nodewise/test/dataplane"
)

// benchNodes is the cluster size of each disruption run.
const benchNodes = 4

// disruptionRun is one row of the disruption table.
type disruptionRun struct {
	name   string
	truth  dataplane.Truth
	wall   time.Duration
	agents agreement // the node agents' per-pod resets vs the apps' own
	judge  string    // the judge's verdict on each node
}

// BenchmarkDisruption runs the same cluster and traffic four times, with the
// real 30 s ztunnel grace period (drain deadline 25 s) and streams that live
// 40–60 s: (a) Istio's default DaemonSet RollingUpdate (maxSurge 1,
// maxUnavailable 0), then nodewise with drain (b) never, (c) always,
// (d) auto. It prints the clients' own ground truth for each, then what the
// node agents counted per pod against the apps' own count of resets, and the
// judge's verdict on each node (nodewise runs are gated by the judge).
// Run it with `make bench-disruption`.
func BenchmarkDisruption(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("SKIP: not root: cannot create network namespaces")
	}
	var runs []disruptionRun
	for i := 0; i < b.N; i++ {
		runs = append(runs,
			benchRun(b, "(a) DaemonSet RollingUpdate maxSurge 1", ""),
			benchRun(b, "(b) nodewise drain never", v1alpha1.DrainNever),
			benchRun(b, "(c) nodewise drain always", v1alpha1.DrainAlways),
			benchRun(b, "(d) nodewise drain auto", v1alpha1.DrainAuto),
		)
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "run\tstreams reset\trequests failed\tstreams closed gracefully\tstreams\trequests\twall time\t\n")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.name, r.truth.StreamsReset, r.truth.RequestsFailed,
			r.truth.StreamsGraceful, r.truth.Streams, r.truth.Requests, r.wall.Round(time.Second))
	}
	_ = tw.Flush()
	fmt.Printf("\nDisruption of a ztunnel upgrade 1.27.3 → 1.28.1 on %d simulated nodes (ground truth from the clients):\n%s", benchNodes, sb.String())

	sb.Reset()
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run\tresets received by apps: agents (Σ pods)\tground truth (Σ pods)\tper pod\tjudge verdict per node\n")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", r.name, r.agents.agent, r.agents.truth, r.agents, r.judge)
	}
	_ = tw.Flush()
	fmt.Printf("\nWhat the node agents (eBPF, app side, per pod) and the judge saw, against the apps' own count of resets received\n(connects refused, requests and streams reset, served connections reset), each pod from the first to the last reading\nthat saw it (every 0.5 s):\n%s", sb.String())
}

// benchRun starts a fresh cluster on the live data plane, lets traffic
// settle, upgrades the ztunnel and istio-cni with the given method, and
// returns the ground truth seen from the start of the upgrade until every
// old stand-in has exited.
func benchRun(b *testing.B, name string, policy v1alpha1.DrainPolicy) disruptionRun {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dp, err := dataplane.New(dataplane.Config{StandinArgv: []string{exe, "-test.run=^$"}})
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
	dp.UseClient(c.Client)
	agents, err := startAgents(ctx, dp, c, b.TempDir(), freePort(b, c.Nodes[0].IP), nil)
	must(b, err)
	defer agents.Close()
	strategy := appsv1.OnDeleteDaemonSetStrategyType
	if policy == "" {
		strategy = appsv1.RollingUpdateDaemonSetStrategyType
	}
	must(b, installCRD(ctx, c.Config, repoCRDDir()))
	must(b, cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.27.3", UpdateStrategy: strategy}))
	must(b, waitDaemonSets(ctx, c, benchNodes))
	must(b, waitSamples(ctx, c))
	time.Sleep(10 * time.Second) // streams open on every pod
	_, before := dp.Truth()
	tally := startTally(agents, dp, 500*time.Millisecond)
	start := time.Now()
	var judgedRollout *v1alpha1.NodeRollout
	var decisions map[string]string
	must(b, cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.28.1", UpdateStrategy: strategy, SkipSamples: true}))
	if policy == "" {
		must(b, waitUpgraded(ctx, c))
	} else {
		must(b, waitTemplateObserved(ctx, c, cluster.CNIName, cluster.ZtunnelName))
		stop, err := startOrchestrator(ctx, c, nil, agentConfig(agents))
		must(b, err)
		defer stop()
		nwc, err := v1alpha1.NewForConfig(c.Config)
		must(b, err)
		rc := nwc.NodeRollouts()
		// Judged like the demo: a drained node has no traffic left in its
		// soak, which passes; a node swapped in place is judged on its pods.
		nr := demoGates(judged(healthyRollout("bench", c.Nodes[0].Name), 5*time.Second, 5*time.Second, v1alpha1.InconclusivePass))
		nr.Spec.Drain.Policy = policy
		got, err := runRollout(ctx, rc, nr, newView(nopWriter{}, false))
		must(b, err)
		if got.Status.Phase != v1alpha1.PhaseCompleted {
			b.Fatalf("%s: rollout %s: %s", name, got.Status.Phase, got.Status.HaltReason)
		}
		judgedRollout = got
		decisions = drainDecisions(ctx, c)
	}
	must(b, waitUpgraded(ctx, c))
	wall := time.Since(start)
	time.Sleep(2 * time.Second) // the last resets reach the clients
	perPod := tally.finish()
	_, after := dp.Truth()
	return disruptionRun{name: name, truth: after.Sub(before), wall: wall,
		agents: compareAgents(perPod), judge: verdicts(judgedRollout, decisions)}
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

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
