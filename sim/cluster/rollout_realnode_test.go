package cluster

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// The real node's data plane: a ztunnel DaemonSet of its own, since the
// simulated one's images (docker.io/istio/…) are served by no registry here.
// Its builds are images the test registry serves under ztunnel's name with
// Istio version tags (what the skew preflight reads): 1.28.1 and 1.28.2 are
// the probe image, a build that serves its port and is Ready; 1.28.3 is the
// pause image, a build that runs but never serves the port its readiness
// probe checks. istiod 1.28 (the simulated control plane, on a simulated
// node) serves them.
const (
	realIstio       = "1.28.1"
	realHealthy     = "1.28.2"
	realNeverReady  = "1.28.3"
	realZtunnelRepo = "ghcr.io/nodewise/ztunnel"
)

// pushZtunnelBuilds pushes the real node's ztunnel builds (above) to reg
// from ctd, which then holds none of them.
func pushZtunnelBuilds(t *testing.T, ctx context.Context, ctd *Containerd, reg *Registry, dir string) {
	t.Helper()
	for archive, tags := range map[string][]string{"probe": {realIstio, realHealthy}, "pause": {realNeverReady}} {
		ref, err := ctd.Import(ctx, filepath.Join(dir, archive+".tar"))
		if err != nil {
			t.Fatalf("%v (run `make images`)", err)
		}
		pushed := []string{ref}
		for _, tag := range tags {
			target := reg.Host + "/" + strings.TrimPrefix(realZtunnelRepo, "ghcr.io/") + ":" + tag
			if err := ctd.Push(ctx, ref, target); err != nil {
				t.Fatal(err)
			}
			pushed = append(pushed, target)
		}
		if err := ctd.Remove(ctx, pushed...); err != nil {
			t.Fatal(err)
		}
	}
}

// realZtunnel is the ztunnel DaemonSet of the real node alone: Istio's name,
// labels (app=ztunnel, the revision) and container name, OnDelete as
// nodewise requires, restricted to the node and tolerating its taint. Its
// container is the probe, which connects to peer (the chart's probe pod on
// the node) 20 times a second and serves 15080, its readiness port: the agent
// counts that traffic on both pods.
func realZtunnel(node, peer string) *appsv1.DaemonSet {
	rev, _ := Revision(realIstio)
	labels := map[string]string{"app": "ztunnel", "istio.io/rev": rev}
	no, yes, uid, grace := false, true, int64(65532), int64(5)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: ZtunnelName, Namespace: IstioNamespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ztunnel"}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            "ztunnel",
					AutomountServiceAccountToken:  &no,
					TerminationGracePeriodSeconds: &grace,
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
					Tolerations:                   []corev1.Toleration{{Key: TaintRealNode, Operator: corev1.TolerationOpExists}},
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "istio-proxy", Image: realZtunnelRepo + ":" + realIstio,
						Args:           []string{"--port=15080", "--peers=" + peer, "--rate=20", "--streams=2"},
						Env:            []corev1.EnvVar{fieldEnv("POD_IP", "status.podIP")},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(15080)}}, PeriodSeconds: 1},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
		},
	}
}

// rolloutOnRealNode has the chart's orchestrator, in its container, roll
// the real node's ztunnel with the judge the chart wires: a healthy build
// completes, passed by the judge on the containerised agent's evidence for
// that node (its probe pod's connections, the baseline read back from the
// agent's history); a build that never gets Ready halts the rollout on that
// node, its old pod left serving.
func rolloutOnRealNode(t *testing.T, ctx context.Context, c *Cluster, n *RealNode, probe corev1.Pod) {
	t.Helper()
	if err := InstallIstio(ctx, c.Client, IstioOptions{Version: realIstio, ControlPlaneOnly: true, SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	dss := c.Client.AppsV1().DaemonSets(IstioNamespace)
	if _, err := dss.Create(ctx, realZtunnel(n.Name, probe.Status.PodIP), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitZtunnel(t, ctx, c, n, realIstio)
	probeTrafficCounted(t, ctx, c, n, probe)
	rc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}

	setZtunnelTag(t, ctx, c, realHealthy)
	nr := runRealRollout(t, ctx, rc, realRollout("real-healthy", n.Name, time.Minute))
	ns := realNodeStatus(t, nr, n.Name)
	t.Logf("healthy build: %s, %s: %s", nr.Status.Phase, ns.State, ns.Verdict)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || ns.State != v1alpha1.NodeDone {
		t.Fatalf("the healthy build: rollout %s (%s), %s %s (%s), want Completed and Done", nr.Status.Phase, nr.Status.HaltReason, n.Name, ns.State, ns.Reason)
	}
	if !strings.HasPrefix(ns.Verdict, "Pass") || ns.Judgement == nil || ns.Judgement.Judgements == 0 {
		t.Errorf("%s was not passed by the judge: verdict %q, judgement %+v", n.Name, ns.Verdict, ns.Judgement)
	}
	// The evidence is the containerised agent's count of the probe's
	// traffic through the node (the real node runs no workload of its own:
	// inconclusive on the workload passes, below). Whether the baseline came
	// from the agent's history or was sampled live depends on how long the
	// agent has run before the node's slot.
	for _, want := range []string{"probe: 1 pods", "connections in the soak", "baseline of node " + n.Name} {
		if !strings.Contains(strings.Join(ns.Detail, "; "), want) {
			t.Errorf("the verdict's detail does not name the agent's evidence %q: %q", want, ns.Detail)
		}
	}
	waitZtunnel(t, ctx, c, n, realHealthy)

	setZtunnelTag(t, ctx, c, realNeverReady)
	nr = runRealRollout(t, ctx, rc, realRollout("real-neverready", n.Name, 20*time.Second))
	ns = realNodeStatus(t, nr, n.Name)
	t.Logf("never-Ready build: %s, %s: %s", nr.Status.Phase, ns.State, nr.Status.HaltReason)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed || !strings.Contains(nr.Status.HaltReason, n.Name) {
		t.Errorf("the never-Ready build: rollout %s (halt %q), %s %s (%s), want Halted on %s, Failed", nr.Status.Phase, nr.Status.HaltReason, n.Name, ns.State, ns.Reason, n.Name)
	}
	// Make-before-break: the healthy build's pod still serves the node.
	pods, err := c.Client.CoreV1().Pods(IstioNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=ztunnel"})
	if err != nil {
		t.Fatal(err)
	}
	serving := false
	for _, p := range pods.Items {
		if p.Spec.NodeName == n.Name && p.DeletionTimestamp == nil && podReady(&p) && p.Spec.Containers[0].Image == realZtunnelRepo+":"+realHealthy {
			serving = true
		}
	}
	if !serving {
		t.Errorf("after the halt no Ready ztunnel %s is left on %s: %+v", realHealthy, n.Name, pods.Items)
	}
}

// probeTrafficCounted waits until the agent has counted a baseline
// window's worth of the probe's traffic from the ztunnel pod (10 s at 20
// connections/s: 200 more accepts on the probe pod than when it began), so
// the judged slot has evidence before the swap. A CI run under load started
// the slot within a second of ztunnel's Ready, and the judge saw no probe
// traffic in either window.
func probeTrafficCounted(t *testing.T, ctx context.Context, c *Cluster, n *RealNode, probe corev1.Pod) {
	t.Helper()
	get := agentGetter(t, ctx, c, n)
	accepts := `nodewise_pod_tcp_accepts_total{namespace="` + probe.Namespace + `",pod="` + probe.Name + `"`
	start, body := -1.0, ""
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var ok bool
		if body, ok = get(ctx, "/metrics"); !ok {
			return false, nil
		}
		if start < 0 {
			start = metricSum(body, accepts)
		}
		return metricSum(body, accepts)-start >= 200, nil
	})
	if err != nil {
		t.Fatalf("the agent never counted 200 of the probe's connections from ztunnel (%s from %v): %v; it served:\n%s", accepts, start, err, body)
	}
}

// realRollout rolls the real node's ztunnel alone, judged: 10 s of baseline
// and of soak, judged every 3 s (the chart's orchestrator samples the agent
// every second, --agent-sample-every in TestChartOnRealNode's values). The
// latency tests get a 5 ms floor: on this shared 2-core machine the pods'
// latencies are the host's CPU scheduling (sim/demo's latencyAboveLoadNoise).
func realRollout(name, node string, swapTimeout time.Duration) *v1alpha1.NodeRollout {
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: name}}
	nr.Spec.Targets = []v1alpha1.TargetRef{{Namespace: IstioNamespace, Name: ZtunnelName}}
	nr.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": node}}
	nr.Spec.MaxParallel, nr.Spec.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	nr.Spec.SwapTimeout = &v1alpha1.Duration{Duration: swapTimeout}
	nr.Spec.Baseline = &v1alpha1.Duration{Duration: 10 * time.Second}
	nr.Spec.Soak = &v1alpha1.Duration{Duration: 10 * time.Second}
	nr.Spec.Gates.Interval = &v1alpha1.Duration{Duration: 3 * time.Second}
	// The real node runs no workload, only the probe: too little workload
	// traffic (Inconclusive) passes, so the probe's evidence decides.
	nr.Spec.Gates.Inconclusive = v1alpha1.InconclusivePass
	floor := &v1alpha1.Duration{Duration: 5 * time.Millisecond}
	nr.Spec.Gates.Latency = []v1alpha1.LatencyGate{{Metric: v1alpha1.MetricSRTT, MinIncrease: floor}, {Metric: v1alpha1.MetricConnectLatency, MinIncrease: floor}}
	return nr
}

// runRealRollout creates nr and waits for a terminal phase.
func runRealRollout(t *testing.T, ctx context.Context, rc *v1alpha1.Client, nr *v1alpha1.NodeRollout) *v1alpha1.NodeRollout {
	t.Helper()
	if _, err := rc.NodeRollouts().Create(ctx, nr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *v1alpha1.NodeRollout
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if got, err = rc.NodeRollouts().Get(ctx, nr.Name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		switch got.Status.Phase {
		case v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted, v1alpha1.PhaseAborted:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("NodeRollout %s never ended: %v; its status: %+v", nr.Name, err, got.Status)
	}
	return got
}

func realNodeStatus(t *testing.T, nr *v1alpha1.NodeRollout, node string) v1alpha1.NodeStatus {
	t.Helper()
	for _, ns := range nr.Status.Nodes {
		if ns.Name == node {
			return ns
		}
	}
	t.Fatalf("NodeRollout %s (%s, %s) has no status of node %s: %+v", nr.Name, nr.Status.Phase, nr.Status.HaltReason, node, nr.Status.Nodes)
	return v1alpha1.NodeStatus{}
}

// setZtunnelTag moves the ztunnel template to a build, as a chart upgrade
// does, and waits until the DaemonSet controller has seen it.
func setZtunnelTag(t *testing.T, ctx context.Context, c *Cluster, tag string) {
	t.Helper()
	setTemplateImage(t, ctx, c, ZtunnelName, realZtunnelRepo+":"+tag)
}

// setTemplateImage moves the first container of an Istio DaemonSet's
// template to image, as a chart upgrade does, and waits until the
// DaemonSet controller has seen it.
func setTemplateImage(t *testing.T, ctx context.Context, c *Cluster, name, image string) {
	t.Helper()
	dss := c.Client.AppsV1().DaemonSets(IstioNamespace)
	var gen int64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := dss.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ds.Spec.Template.Spec.Containers[0].Image = image
		ds, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
		if err == nil {
			gen = ds.Generation
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ds, err := dss.Get(ctx, name, metav1.GetOptions{})
		return err == nil && ds.Status.ObservedGeneration >= gen, nil
	})
	if err != nil {
		t.Fatalf("the DaemonSet controller never observed %s's template %s: %v", name, image, err)
	}
}

// waitZtunnel waits for one Ready ztunnel pod of build tag on the node.
func waitZtunnel(t *testing.T, ctx context.Context, c *Cluster, n *RealNode, tag string) {
	t.Helper()
	waitPods(t, ctx, c.Client, IstioNamespace, "app=ztunnel", func(pods []corev1.Pod) bool {
		for _, p := range pods {
			if p.Spec.NodeName == n.Name && p.DeletionTimestamp == nil && podReady(&p) && p.Spec.Containers[0].Image == realZtunnelRepo+":"+tag {
				return true
			}
		}
		return false
	})
}
