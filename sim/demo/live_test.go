package demo

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/dataplane"
	"github.com/nodewise/nodewise/test/testkit"
)

// testGrace is the ztunnel grace period the live tests use: its drain
// deadline is 5 s (grace − 1 s), and streams live 30 s or more, longer than
// the whole swap.
const testGrace = 6

// liveEnv is a small simulated cluster on the live data plane, with the CRD,
// Istio 1.27.3 (OnDelete, grace testGrace) and an in-process orchestrator.
type liveEnv struct {
	t      testing.TB
	dp     *dataplane.DataPlane
	c      *cluster.Cluster
	rc     v1alpha1.NodeRolloutInterface
	agents *dataplane.Agents
	// reg is the orchestrator's registry, served on metricsAddr (as
	// --metrics-addr serves it).
	reg         *prometheus.Registry
	metricsAddr string
}

func newLiveEnv(t testing.TB, nodes int) *liveEnv {
	t.Helper()
	return newLiveEnvWired(t, nodes, testAgents(t))
}

// liveTraffic is what the live cluster's app clients send: streams that
// outlive the whole swap.
var liveTraffic = dataplane.Traffic{StreamLife: 30 * time.Second, StreamGap: 300 * time.Millisecond}

// testAgents starts every node's agent with the test CA and token.
func testAgents(t testing.TB) wireAgents {
	return func(ctx context.Context, dp *dataplane.DataPlane, c *cluster.Cluster) (*dataplane.Agents, *judgegate.AgentConfig, error) {
		agents, err := startAgents(ctx, dp, c, t.TempDir(), testkit.FreePort(t, c.Nodes[0].IP), testLog(t))
		return agents, agentConfig(agents), err
	}
}

// wireAgents starts the node agents of a live cluster and says how the
// orchestrator reaches them.
type wireAgents func(context.Context, *dataplane.DataPlane, *cluster.Cluster) (*dataplane.Agents, *judgegate.AgentConfig, error)

// newLiveEnvWired starts a live cluster whose agents wire starts; each istio
// option changes the first Istio install (such as registering an injector).
func newLiveEnvWired(t testing.TB, nodes int, wire wireAgents, istio ...func(*cluster.IstioOptions)) *liveEnv {
	t.Helper()
	return newLiveEnvTraffic(t, nodes, liveTraffic, wire, istio...)
}

// newLiveEnvTraffic is newLiveEnvWired with the app clients' traffic.
func newLiveEnvTraffic(t testing.TB, nodes int, traffic dataplane.Traffic, wire wireAgents, istio ...func(*cluster.IstioOptions)) *liveEnv {
	t.Helper()
	return newLiveEnvSwap(t, nodes, traffic, wire, model.SwapSurge, istio...)
}

// newLiveEnvSwap is newLiveEnvTraffic with the orchestrator swapping
// ztunnel the swap way.
func newLiveEnvSwap(t testing.TB, nodes int, traffic dataplane.Traffic, wire wireAgents, swap model.SwapKind, istio ...func(*cluster.IstioOptions)) *liveEnv {
	t.Helper()
	testkit.RequireNetns(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dp, err := dataplane.New(dataplane.Config{Log: testLog(t), StandinArgv: []string{exe, "-test.run=^$"}, StandinLog: os.Stderr, Traffic: traffic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dp.Close(); err != nil {
			t.Errorf("closing the data plane: %v", err)
		}
	})
	c := cluster.Start(t, cluster.Options{Nodes: nodes, Zones: 1, ReadyDelay: 300 * time.Millisecond, Runtime: dp, Log: testLog(t)})
	dp.UseCluster(c)
	ctx := context.Background()
	agents, agentCfg, err := wire(ctx, dp, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := agents.Close(); err != nil {
			t.Errorf("stopping the node agents: %v", err)
		}
	})
	cluster.InstallCRDs(t, c, testkit.CRD(testkit.NodeRolloutsCRD))
	opts := cluster.IstioOptions{Version: "1.27.3", UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType}
	for _, o := range istio {
		o(&opts)
	}
	if err := cluster.InstallIstio(ctx, c.Client, opts); err != nil {
		t.Fatal(err)
	}
	if err := setZtunnelGrace(ctx, c, testGrace); err != nil {
		t.Fatal(err)
	}
	if err := waitDaemonSets(ctx, c, nodes); err != nil {
		t.Fatal(err)
	}
	// Replace the first ztunnels at once (no grace) so every node runs one
	// with the short grace.
	zero := int64(0)
	if err := c.Client.CoreV1().Pods(cluster.IstioNamespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: "app=ztunnel"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := waitDaemonSets(ctx, c, nodes); err != nil {
		t.Fatal(err)
	}
	// The nodewise-probe DaemonSet: the live data plane runs the real probe
	// in each of its pods, so every node has probe evidence, drained or not.
	if err := installProbe(ctx, c.Client, nodes, ProbeTraffic{}); err != nil {
		t.Fatal(err)
	}
	if err := waitSamples(ctx, c); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metricsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testkit.FreePort(t, "127.0.0.1")))
	stop, err := startOrchestrator(ctx, c, testLog(t), agentCfg, swap, func(cfg *orchestrator.Config) {
		cfg.Registry, cfg.MetricsAddr = reg, metricsAddr
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	rc := nwc.NodeRollouts()
	return &liveEnv{t: t, dp: dp, c: c, rc: rc, agents: agents, reg: reg, metricsAddr: metricsAddr}
}

// rolloutOn rolls one node with a drain policy, judged with a 5 s baseline and
// soak, and waits for a terminal phase.
func (e *liveEnv) rolloutOn(name, node string, policy v1alpha1.DrainPolicy, inconclusive v1alpha1.InconclusivePolicy) *v1alpha1.NodeRollout {
	e.t.Helper()
	nr := judged(healthyRollout(name, node), 5*time.Second, 5*time.Second, inconclusive)
	nr.Spec.Drain.Policy = policy
	// These builds are healthy and the tests judge resets and drains.
	latencyAboveLoadNoise(nr)
	return e.run(nr, node)
}

// run applies nr to node alone and waits for a terminal phase.
func (e *liveEnv) run(nr *v1alpha1.NodeRollout, node string) *v1alpha1.NodeRollout {
	e.t.Helper()
	nr.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": node}}
	got, err := runRollout(context.Background(), e.rc, nr, newView(testWriter{e.t}, false))
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// testLog writes the kubelet's debug log to $NODEWISE_TEST_LOG when set.
func testLog(t testing.TB) *zap.Logger {
	path := os.Getenv("NODEWISE_TEST_LOG")
	if path == "" {
		return nil
	}
	zc := zap.NewDevelopmentConfig()
	zc.OutputPaths = []string{path}
	l, err := zc.Build()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// upgrade moves both charts to version and waits until the DaemonSet
// controller sees it.
func (e *liveEnv) upgrade(version string) {
	e.t.Helper()
	ctx := context.Background()
	if err := cluster.InstallIstio(ctx, e.c.Client, cluster.IstioOptions{Version: version, UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType, SkipSamples: true}); err != nil {
		e.t.Fatal(err)
	}
	if err := setZtunnelGrace(ctx, e.c, testGrace); err != nil {
		e.t.Fatal(err)
	}
	if err := waitTemplateObserved(ctx, e.c, cluster.CNIName, cluster.ZtunnelName); err != nil {
		e.t.Fatal(err)
	}
}

// settle lets streams open on every pod: a stream older than the drain
// deadline exists when the swap begins.
func (e *liveEnv) settle() dataplane.Truth {
	time.Sleep(7 * time.Second)
	_, t := e.dp.Truth()
	return t
}

// nodeStatus is node's entry in the rollout's status.
func nodeStatus(t testing.TB, nr *v1alpha1.NodeRollout, node string) v1alpha1.NodeStatus {
	t.Helper()
	for _, n := range nr.Status.Nodes {
		if n.Name == node {
			return n
		}
	}
	t.Fatalf("node %s is not in the status of rollout %s", node, nr.Name)
	return v1alpha1.NodeStatus{}
}

// TestLiveDrainAutoSwapNoReset: one node swapped with drain auto while
// traffic runs: its pods are evicted (streams closed with FIN) before the
// ztunnel swap, so no long-lived stream anywhere sees a reset. The judge
// gated the node through its agent (a drained node has no traffic left in
// its soak: Inconclusive, which this rollout lets pass).
func TestLiveDrainAutoSwapNoReset(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 3)
	e.upgrade("1.28.1")
	before := e.settle()
	nr := e.rolloutOn("auto", "node-001", v1alpha1.DrainAuto, v1alpha1.InconclusivePass)
	time.Sleep(2 * time.Second)
	_, after := e.dp.Truth()
	w := after.Sub(before)
	t.Logf("during the swap: %s", w)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("rollout %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	if w.StreamsReset != 0 {
		t.Errorf("%d streams reset (ages %v); drain auto must reset none", w.StreamsReset, w.ResetAges())
	}
	if w.StreamsGraceful == 0 || w.Requests == 0 {
		t.Errorf("no traffic measured during the swap: %s", w)
	}
	// Auto decided from the node agent's connection ages (streams older
	// than the 5 s deadline), so it drained.
	if d := drainDecisions(context.Background(), e.c)["node-001"]; d != nodestep.DrainDecisionDrain {
		t.Errorf("drain auto's decision on node-001: %q, want %q", d, nodestep.DrainDecisionDrain)
	}
	ns := nodeStatus(t, nr, "node-001")
	t.Logf("verdict: %s", ns.Verdict)
	if !strings.HasPrefix(ns.Verdict, "Pass") || ns.Judgement == nil || ns.Judgement.Judgements == 0 {
		t.Errorf("node-001 was not judged through its agent: verdict %q, judgement %+v", ns.Verdict, ns.Judgement)
	}
}

// TestLiveInPlaceSwapResetsOldStreams: one node swapped in place (drain
// never): the old ztunnel stand-in keeps established streams until its
// drain deadline, then resets them, so the streams reset are exactly ones
// older than the deadline. The judge counts those resets as planned (from
// the agent's connection ages before the swap) and passes the node.
func TestLiveInPlaceSwapResetsOldStreams(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 3)
	e.upgrade("1.28.1")
	before := e.settle()
	nr := e.rolloutOn("inplace", "node-001", v1alpha1.DrainNever, v1alpha1.InconclusivePause)
	// The soak (5 s) can end as the old stand-in's drain deadline (5 s after
	// its SIGTERM) fires: give its resets time to reach the apps' tallies.
	deadline := dataplane.DrainDeadline(testGrace*time.Second, true)
	var w dataplane.Truth
	for end := time.Now().Add(deadline + 10*time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, after := e.dp.Truth()
		if w = after.Sub(before); w.StreamsReset > 0 || time.Now().After(end) {
			break
		}
	}
	t.Logf("during the swap: %s; reset ages %v", w, w.ResetAges())
	ns := nodeStatus(t, nr, "node-001")
	t.Logf("verdict: %s", ns.Verdict)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("rollout %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	if w.StreamsReset == 0 {
		t.Fatalf("no stream was reset by the in-place swap: the old stand-in did not reset at its deadline")
	}
	if m := w.MinResetAge(); m < deadline {
		t.Errorf("a stream %s old was reset; only streams older than the drain deadline %s should be", m, deadline)
	}
	if j := ns.Judgement; !strings.HasPrefix(ns.Verdict, "Pass") || j == nil || j.PlannedResets == 0 || j.Tests == 0 {
		t.Errorf("want the gate passed with planned resets counted: verdict %q, judgement %+v", ns.Verdict, j)
	}
	assertBaselineFromHistory(t, ns)
}

// assertBaselineFromHistory: the reasons behind the node's verdict
// (status.nodes[].detail) say its baseline was read back from its agent's
// history at the slot's start, all of the window but the moments between
// the read and the cordon, not waited out. The agents counted for longer
// than the baseline before the rollout began.
func assertBaselineFromHistory(t testing.TB, ns v1alpha1.NodeStatus) {
	t.Helper()
	want := "baseline of node " + ns.Name + " from its agent's history: "
	detail := strings.Join(ns.Detail, "; ")
	_, after, ok := strings.Cut(detail, want)
	if !ok {
		t.Errorf("node %s's detail does not say its baseline came from its agent's history: %q", ns.Name, detail)
		return
	}
	var read, window time.Duration
	var readS, windowS string
	if _, err := fmt.Sscanf(after, "%s of the %s window", &readS, &windowS); err == nil {
		read, _ = time.ParseDuration(readS)
		window, _ = time.ParseDuration(windowS)
	}
	if window == 0 || read < window-2*sampleEvery {
		t.Errorf("node %s: %s of the %s baseline window read from history, want all but the last moments: %q", ns.Name, read, window, detail)
	}
}

// TestLiveRstBuildHaltsAtCanary: a ztunnel build that resets a share of
// connections (-rst), swapped in place on the node with the most ambient
// pods: the judge sees the resets through that node's agent and the rollout
// halts there, with the judge's reason.
func TestLiveRstBuildHaltsAtCanary(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 3)
	node := e.faultyBuild(cluster.ZtunnelName, "1.27.4-rst")
	nr := e.run(faultyRollout("rst", node, true), node)
	ns := nodeStatus(t, nr, node)
	t.Logf("halt reason: %s", nr.Status.HaltReason)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node %s %s (verdict %q): want Halted at %s", nr.Status.Phase, node, ns.State, ns.Verdict, node)
	}
	if !strings.HasPrefix(ns.Verdict, "Fail") || !strings.Contains(nr.Status.HaltReason, "resets") || ns.Judgement == nil || ns.Judgement.Regressions == 0 {
		t.Errorf("want the judge's reset regression as the reason: verdict %q, halt %q, judgement %+v", ns.Verdict, nr.Status.HaltReason, ns.Judgement)
	}
	assertBaselineFromHistory(t, ns)
}

// faultyBuild points the template of the DaemonSet ds (cluster.ZtunnelName
// or cluster.CNIName) at tag (a faulty build such as 1.27.4-rst), lets
// streams open, and returns the node with the most ambient pods: the canary
// whose judgement has the most to go on.
func (e *liveEnv) faultyBuild(ds, tag string) string {
	e.t.Helper()
	ctx := context.Background()
	if err := cluster.SetImageTag(ctx, e.c.Client, ds, tag); err != nil {
		e.t.Fatal(err)
	}
	if err := waitTemplateObserved(ctx, e.c, ds); err != nil {
		e.t.Fatal(err)
	}
	e.settle()
	node, err := busiestAmbientNode(ctx, e.c)
	if err != nil {
		e.t.Fatal(err)
	}
	return node
}

// latencyAboveLoadNoise gives a healthy rollout's latency tests (srtt and
// connect latency) a 5ms floor. The simulated pods' latencies are the
// host's CPU scheduling: on a loaded 2-core CI machine srtt went 89µs →
// 1.14ms (and 105µs → 1.16ms) at p99 with no fault on a node judged alone,
// and a pod's connect latency 124µs → 699µs over a 5s baseline, which the
// default floor (500µs) fails. 5ms keeps both tests on, far above that
// noise; the -slow builds' tests keep the defaults.
func latencyAboveLoadNoise(nr *v1alpha1.NodeRollout) {
	floor := &v1alpha1.Duration{Duration: 5 * time.Millisecond}
	nr.Spec.Gates.Latency = append(nr.Spec.Gates.Latency,
		v1alpha1.LatencyGate{Metric: v1alpha1.MetricSRTT, MinIncrease: floor},
		v1alpha1.LatencyGate{Metric: v1alpha1.MetricConnectLatency, MinIncrease: floor})
}
