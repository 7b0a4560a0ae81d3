package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/nodeagent"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/test/testkit"
)

// The real istio-cni's builds a NodeRollout rolls between
// (hack/istio-cni-image.sh packs each as bin/images/istio-cni-TAG.tar):
// one pinned source, install-cni and the plugin stamped with the tag as
// Istio's version. cniOld and cniNew are healthy; cniDropsRules's start-up
// reconciliation deletes the in-pod rules of the pods already enrolled.
// istiod 1.28 (the simulated control plane) serves them all, for the skew
// preflight.
const (
	cniOld        = "1.28.1"
	cniNew        = "1.28.2"
	cniDropsRules = "1.28.3"
	realCNIRepo   = "ghcr.io/nodewise/istio-cni"
)

// TestRealIstioCNIRolloutOnRealNode rolls the real istio-cni on the real
// kubelet node with NodeRollouts, judged on the node agent's evidence:
// istio-cni installed with Istio's chart at cniOld (updateStrategy
// OnDelete, as nodewise requires; its nftables backend), the ZDS stand-in
// ztunnel, an ambient pod enrolled by its rules; the orchestrator in this
// process with the judge gate, reading an agent run in this process on the
// host's /proc (its snapshots with the pods' enrollment, its istio-cni
// health). A rollout to cniNew completes, the node passed by the judge
// with istio-cni's health at the new plugin version, the pod still
// enrolled, istio-cni's pod on the new image; a rollout to cniDropsRules
// halts, the enrollment watchdog failing the node on the pod whose rules
// the new build removed.
func TestRealIstioCNIRolloutOnRealNode(t *testing.T) {
	start := time.Now()
	c := Start(t, Options{Nodes: 1})
	InstallCRDs(t, c, testkit.CRD(testkit.NodeRolloutsCRD))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := imagesDir()
	bin := filepath.Dir(dir)
	n := startRealNode(t, ctx, c, bin, nil)
	ztunnel, err := n.Containerd.Import(ctx, filepath.Join(dir, "ztunnel.tar"))
	if err != nil {
		t.Fatalf("%v (make images)", err)
	}
	for _, v := range []string{cniOld, cniNew, cniDropsRules} {
		ref, err := n.Containerd.Import(ctx, filepath.Join(dir, "istio-cni-"+v+".tar"))
		if err != nil {
			t.Fatalf("%v (make tool-istioctl, then make images)", err)
		}
		if ref != realCNIRepo+":"+v {
			t.Fatalf("istio-cni-%s.tar holds %s, want %s:%s", v, ref, realCNIRepo, v)
		}
	}
	chart, mesh, pause := istioCNIOnRealNode(t, ctx, c, n, bin, ztunnel)
	installIstioCNI(t, ctx, c, n, bin, chart, realCNIRepo+":"+cniOld, "install", istioCNIBackend{name: "nftables", nftables: true},
		"--set", "updateStrategy.type=OnDelete", "--set", "updateStrategy.rollingUpdate=null")
	waitIstioCNIAndZtunnel(t, ctx, c, n)
	// istiod after the chart: the chart owns istio-cni's ServiceAccount,
	// which InstallIstio creates only when it is missing.
	if err := InstallIstio(ctx, c.Client, IstioOptions{Version: cniOld, ControlPlaneOnly: true, SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	pod := ambientPod(t, ctx, c, n, "app", pause)
	if got := waitEnrollment(t, ctx, mesh, pod, func(p wire.PodEnrollment) bool { return p.Result == wire.Enrolled }); got.Result != wire.Enrolled {
		t.Fatalf("before the rollouts: %s, want enrolled by istio-cni %s", got, cniOld)
	}
	agents := runInProcessAgent(t, ctx, c, n, mesh)
	runJudgedOrchestrator(t, ctx, c, agents)
	rc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("setup %s", time.Since(start).Round(time.Second))

	phase := time.Now()
	setTemplateImage(t, ctx, c, CNIName, realCNIRepo+":"+cniNew)
	nr := runRealRollout(t, ctx, rc, cniRollout("cni-healthy", n.Name))
	ns := realNodeStatus(t, nr, n.Name)
	t.Logf("healthy build: %s, %s: %s; %q", nr.Status.Phase, ns.State, ns.Verdict, ns.Detail)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || ns.State != v1alpha1.NodeDone || !strings.HasPrefix(ns.Verdict, "Pass") {
		t.Fatalf("the healthy build: rollout %s (%s), %s %s (%s, verdict %q), want Completed, Done and passed", nr.Status.Phase, nr.Status.HaltReason, n.Name, ns.State, ns.Reason, ns.Verdict)
	}
	// The judge's evidence: the agent's enrollment of the pod and
	// istio-cni's health with the new build's plugin on the node.
	detail := strings.Join(ns.Detail, "; ")
	for _, want := range []string{"enrolled 1/1", "version " + cniNew} {
		if !strings.Contains(detail, want) {
			t.Errorf("the verdict's detail does not name the agent's evidence %q: %q", want, ns.Detail)
		}
	}
	if got := waitEnrollment(t, ctx, mesh, pod, func(p wire.PodEnrollment) bool { return p.Result == wire.Enrolled }); got.Result != wire.Enrolled {
		t.Errorf("after the healthy build: %s, want still enrolled", got)
	}
	waitIstioCNIImage(t, ctx, c, n, realCNIRepo+":"+cniNew)
	t.Logf("healthy rollout in %s", time.Since(phase).Round(time.Second))

	phase = time.Now()
	setTemplateImage(t, ctx, c, CNIName, realCNIRepo+":"+cniDropsRules)
	nr = runRealRollout(t, ctx, rc, cniRollout("cni-drops-rules", n.Name))
	ns = realNodeStatus(t, nr, n.Name)
	t.Logf("faulty build: %s, %s: %s", nr.Status.Phase, ns.State, nr.Status.HaltReason)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("the build that drops the pods' rules: rollout %s (halt %q), %s %s (%s), want Halted, Failed", nr.Status.Phase, nr.Status.HaltReason, n.Name, ns.State, ns.Reason)
	}
	for _, want := range []string{n.Name, "enrollment watchdog", "pod ambient/app was enrolled before the swap and is not now", "redirection failed"} {
		if !strings.Contains(nr.Status.HaltReason, want) {
			t.Errorf("the halt's reason %q does not name %q (the pod's lost enrollment on %s)", nr.Status.HaltReason, want, n.Name)
		}
	}
	got := waitEnrollment(t, ctx, mesh, pod, func(p wire.PodEnrollment) bool { return p.Result != wire.Enrolled })
	if got.Result != wire.NotEnrolled || got.Failed != wire.CheckRedirection {
		t.Errorf("after the faulty build: %s, want not enrolled on redirection", got)
	}
	t.Logf("faulty rollout in %s; whole test %s", time.Since(phase).Round(time.Second), time.Since(start).Round(time.Second))
}

// cniRollout rolls the real node's istio-cni alone, judged as realRollout
// is, with a 5 s baseline, a 15 s soak and the enrollment watchdog's bound
// at 5 s, well inside it.
func cniRollout(name, node string) *v1alpha1.NodeRollout {
	nr := realRollout(name, node, time.Minute)
	nr.Spec.Targets = []v1alpha1.TargetRef{{Namespace: IstioNamespace, Name: CNIName}}
	nr.Spec.Baseline = &v1alpha1.Duration{Duration: 5 * time.Second}
	nr.Spec.Soak = &v1alpha1.Duration{Duration: 15 * time.Second}
	nr.Spec.EnrollmentTimeout = &v1alpha1.Duration{Duration: 5 * time.Second}
	return nr
}

// inProcessAgent is a node agent run in this process, on the real node's
// host, as the orchestrator's agents for that node: its snapshots (with
// the ambient pods' enrollment) and its istio-cni health.
type inProcessAgent struct {
	a    *nodeagent.Agent
	node string
}

func (s inProcessAgent) Snapshot(_ context.Context, node string) (wire.Snapshot, error) {
	if node != s.node {
		return wire.Snapshot{}, fmt.Errorf("no agent on node %s", node)
	}
	return s.a.Snapshot()
}

func (s inProcessAgent) CNI(ctx context.Context, node, version string) (wire.CNIHealth, error) {
	if node != s.node {
		return wire.CNIHealth{}, fmt.Errorf("no agent on node %s", node)
	}
	return s.a.CheckCNI(ctx, version), nil
}

// runInProcessAgent runs cniAgent with mesh until the test ends.
func runInProcessAgent(t *testing.T, ctx context.Context, c *Cluster, n *RealNode, mesh nodeagent.MeshSource) inProcessAgent {
	t.Helper()
	a := cniAgent(t, c, n, mesh)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, err := a.Addr(ctx); err != nil {
		t.Fatal(err)
	}
	return inProcessAgent{a: a, node: n.Name}
}

// runJudgedOrchestrator runs the orchestrator in this process until the
// test ends, with the judge gate the chart wires (judgegate.BuildOn, its
// Recorder sampling the agents every 500 ms) and agents as its agents.
func runJudgedOrchestrator(t *testing.T, ctx context.Context, c *Cluster, agents inProcessAgent) {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	g, rec, err := judgegate.BuildOn(agents, 500*time.Millisecond, remote.AddressPolicy{}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	o, err := orchestrator.New(orchestrator.Config{
		RESTConfig: c.Config, Namespace: "default", Identity: "cni-rollout",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Resync: 500 * time.Millisecond, Registry: prometheus.NewRegistry(), Logger: log, Gate: g, Agents: agents,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = rec.Run(ctx); done <- struct{}{} }()
	go func() { _ = o.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
}

// waitIstioCNIImage waits for istio-cni's pod on the node to be Ready on image.
func waitIstioCNIImage(t *testing.T, ctx context.Context, c *Cluster, n *RealNode, image string) {
	t.Helper()
	waitPods(t, ctx, c.Client, IstioNamespace, "k8s-app=istio-cni-node", func(pods []corev1.Pod) bool {
		for _, p := range pods {
			if p.Spec.NodeName == n.Name && p.DeletionTimestamp == nil && podReady(&p) && p.Spec.Containers[0].Image == image {
				return true
			}
		}
		return false
	})
}
