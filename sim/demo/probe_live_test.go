package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/dataplane"
)

// drainedRollout rolls with drain always: the canary's app pods are evicted
// before its swap, so its soak has no workload traffic and the judge has
// only the probe (a DaemonSet pod, which the drain leaves) to go on. It lets
// an Inconclusive node pass, as the demo did before the probe: without the
// probe's evidence a drained node passes whatever the build does, so only
// that evidence can halt it (and a Pass must show it was judged on it).
func drainedRollout(name, canary string) *v1alpha1.NodeRollout {
	nr := demoGates(judged(healthyRollout(name, canary), 5*time.Second, 10*time.Second, v1alpha1.InconclusivePass))
	nr.Spec.Drain.Policy = v1alpha1.DrainAlways
	return nr
}

// haltsOnProbe rolls a faulty ztunnel build (its image tag selects the
// stand-in's behaviour) onto a drained canary and checks the judge halted
// there on the probe's evidence.
func haltsOnProbe(t *testing.T, tag string) {
	t.Parallel()
	e := newLiveEnv(t, 3)
	ctx := context.Background()
	if err := cluster.SetImageTag(ctx, e.c.Client, cluster.ZtunnelName, tag); err != nil {
		t.Fatal(err)
	}
	if err := waitTemplateObserved(ctx, e.c, cluster.ZtunnelName); err != nil {
		t.Fatal(err)
	}
	e.settle()
	const canary = "node-001"
	nr := e.run(drainedRollout("drained", canary), canary)
	ns := nodeStatus(t, nr, canary)
	t.Logf("halt reason: %s", nr.Status.HaltReason)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node %s %s (verdict %q): want Halted at %s", nr.Status.Phase, canary, ns.State, ns.Verdict, canary)
	}
	if pods := workloadPodsOn(ctx, t, e.c, canary); len(pods) > 0 {
		t.Errorf("the canary was not drained: workload pods %v are on it", pods)
	}
	// A regressed probe row leads the halt reason ("probe: … → …"); the
	// detail has the row by its pod and the probe's before → after line.
	detail := strings.Join(ns.Detail, "; ")
	if !strings.HasPrefix(ns.Verdict, "Fail: probe: ") || !strings.Contains(nr.Status.HaltReason, "gate Fail: probe: ") ||
		!strings.Contains(detail, "probe nodewise-probe/") || !strings.Contains(detail, "probe: ") {
		t.Errorf("want the probe's regression as the halt reason: verdict %q, halt %q, detail %q", ns.Verdict, nr.Status.HaltReason, detail)
	}
	if ns.Judgement == nil || ns.Judgement.Regressions == 0 {
		t.Errorf("no regression in the canary's judgement: %+v", ns.Judgement)
	}
}

// TestLiveDrainedRstBuildHaltsOnProbe: the -rst build (a quarter of
// proxied connections reset) on a drained canary, whose evicted workload
// left no traffic in its soak: the probe's resets halt the rollout there,
// before the uncordon.
func TestLiveDrainedRstBuildHaltsOnProbe(t *testing.T) { haltsOnProbe(t, "1.27.4-rst") }

// TestLiveDrainedSlowBuildHaltsOnProbe: the -slow build (added connect
// latency) on a drained canary halts on the probe's connect latency.
func TestLiveDrainedSlowBuildHaltsOnProbe(t *testing.T) { haltsOnProbe(t, "1.27.4-slow") }

// TestLiveDrainedHealthyBuildPassesOnProbe: a healthy build with drain
// always completes on every node, each judged Pass on its probe's traffic
// (tested probe rows and the probe's line among the reasons), none
// Inconclusive (which this rollout would let pass).
func TestLiveDrainedHealthyBuildPassesOnProbe(t *testing.T) {
	e := newLiveEnv(t, 3)
	e.upgrade("1.28.1")
	e.settle()
	nr := drainedRollout("healthy", "node-001")
	got, err := runRollout(context.Background(), e.rc, nr, newView(testWriter{t}, false))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("rollout %s: %s", got.Status.Phase, got.Status.HaltReason)
	}
	for _, n := range e.c.Nodes {
		ns := nodeStatus(t, got, n.Name)
		t.Logf("%s: %s", n.Name, ns.Verdict)
		if !strings.HasPrefix(ns.Verdict, "Pass") || !strings.Contains(ns.Verdict, "on the probe") && !strings.Contains(ns.Verdict, "the probe's") ||
			!strings.Contains(strings.Join(ns.Detail, "; "), "probe: ") {
			t.Errorf("node %s: want Pass judged on the probe's traffic, got %q (detail %q)", n.Name, ns.Verdict, ns.Detail)
		}
		j := ns.Judgement
		if j == nil || j.IntervalOutcome != v1alpha1.OutcomePass {
			t.Errorf("node %s: last interval %+v, want Pass", n.Name, j)
			continue
		}
		probeRows := 0
		for _, r := range j.Rows {
			if strings.HasPrefix(r.Pod, "nodewise-probe/") && r.P != "" {
				probeRows++
			}
		}
		if probeRows == 0 {
			t.Errorf("node %s: no tested probe row in its judgement %+v", n.Name, j.Rows)
		}
	}
}

// workloadPodsOn lists the pods on node that a drain evicts: not DaemonSet
// pods, not the control plane's.
func workloadPodsOn(ctx context.Context, t *testing.T, c *cluster.Cluster, node string) []string {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Namespace == metav1.NamespaceSystem || p.Namespace == cluster.IstioNamespace {
			continue
		}
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "DaemonSet" {
			continue
		}
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// TestLiveProbeRunsThroughTheStandins: on a steady live cluster every node
// has one nodewise-probe pod, a DaemonSet pod, served by its node's ztunnel
// stand-in; the probes exchange requests and hold streams with no failure;
// and each node's agent counts its probe's traffic on both sides: the app
// side (the probe's own sockets) and the proxy side (the stand-in's sockets
// in the probe's namespace, outbound and inbound).
func TestLiveProbeRunsThroughTheStandins(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 3)
	ctx := context.Background()
	e.settle()
	pods, err := e.c.Client.CoreV1().Pods(health.DefaultProbeNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for _, p := range pods.Items {
		perNode[p.Spec.NodeName]++
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "DaemonSet" || ref.Name != dataplane.ProbeName {
			t.Errorf("probe pod %s is not the DaemonSet %s's: owner %+v", p.Name, dataplane.ProbeName, ref)
		}
		key := p.Namespace + "/" + p.Name
		if by := e.dp.ServedBy(p.UID); len(by) == 0 {
			t.Errorf("probe pod %s: no ztunnel stand-in listens in its namespace", key)
		}
		st, ok := e.dp.ProbeStats(key)
		t.Logf("%s on %s: %+v", key, p.Spec.NodeName, st)
		if !ok || st.Requests == 0 || st.Served == 0 || st.StreamLines == 0 {
			t.Errorf("probe %s: no traffic (running %t): %+v", key, ok, st)
		}
		if st.RequestFailures != 0 || st.StreamBreaks != 0 {
			t.Errorf("probe %s on a steady cluster: %d requests failed, %d streams broke; want 0", key, st.RequestFailures, st.StreamBreaks)
		}
		snap, err := e.agents.Snapshot(p.Spec.NodeName)
		if err != nil {
			t.Fatal(err)
		}
		sides := map[wire.Side]wire.PodCounters{}
		for _, pc := range snap.Pods {
			if pc.Namespace == p.Namespace && pc.Name == p.Name && pc.UID == string(p.UID) {
				sides[pc.Side] = pc
			}
		}
		app, proxy := sides[wire.SideApp], sides[wire.SideProxy]
		if app.Connects == 0 || app.Accepts == 0 || proxy.Connects == 0 || proxy.Accepts == 0 {
			t.Errorf("agent of %s: probe %s counted app side %d connects/%d accepts, proxy side %d/%d; want traffic on both",
				p.Spec.NodeName, key, app.Connects, app.Accepts, proxy.Connects, proxy.Accepts)
		}
	}
	for _, n := range e.c.Nodes {
		if perNode[n.Name] != 1 {
			t.Errorf("node %s runs %d probe pods, want 1", n.Name, perNode[n.Name])
		}
	}
}
