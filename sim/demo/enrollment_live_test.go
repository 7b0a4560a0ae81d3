package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/dataplane"
)

// TestLiveNoListenBuildHaltsOnEnrollment: a ztunnel build that leaves one
// pod's namespace without its HBONE listener (-nolisten), swapped in place on
// the busiest node. The simulated pods' traffic is plaintext and never uses
// HBONE, so the traffic figures alone pass the node; the enrollment check
// halts the rollout there, naming the pod and the listeners check.
func TestLiveNoListenBuildHaltsOnEnrollment(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 3)
	node := e.faultyBuild(cluster.ZtunnelName, "1.27.4-nolisten")
	nr := faultyRollout("nolisten", node, true)
	latencyAboveLoadNoise(nr) // the build is healthy for traffic: keep load noise out of its traffic verdict
	nr = e.run(nr, node)
	ns := nodeStatus(t, nr, node)
	t.Logf("halt reason: %s", nr.Status.HaltReason)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node %s %s (verdict %q): want Halted at %s", nr.Status.Phase, node, ns.State, ns.Verdict, node)
	}
	if !strings.Contains(nr.Status.HaltReason, "was enrolled before the swap and is not after it: listeners failed: nothing listens on 15008") {
		t.Errorf("halt reason %q: want the pod that lost its HBONE listener, with the listeners check", nr.Status.HaltReason)
	}
	j := ns.Judgement
	if j == nil {
		t.Fatalf("node %s has no judgement", node)
	}
	if j.TrafficOutcome != v1alpha1.OutcomePass {
		t.Errorf("the traffic figures alone: %q, want Pass (only enrollment should fail this build); verdict %q", j.TrafficOutcome, ns.Verdict)
	}
	var n, total int
	if _, err := fmt.Sscanf(j.Enrollment, "enrolled %d/%d", &n, &total); err != nil || total == 0 || n != total-1 {
		t.Errorf("enrollment count %q: want all the node's ambient pods but one enrolled", j.Enrollment)
	}
}

// TestLiveHealthyRolloutKeepsEveryPodEnrolled: a healthy build rolled over
// every node in place: every ambient pod is enrolled after the swap on every
// node, and each node's status says so in one count.
func TestLiveHealthyRolloutKeepsEveryPodEnrolled(t *testing.T) {
	e := newLiveEnv(t, 3)
	e.upgrade("1.28.1")
	e.settle()
	canary, err := busiestAmbientNode(context.Background(), e.c)
	if err != nil {
		t.Fatal(err)
	}
	nr := judged(healthyRollout("enrolled", canary), 5*time.Second, 5*time.Second, v1alpha1.InconclusivePass)
	nr.Spec.Drain.Policy = v1alpha1.DrainNever
	latencyAboveLoadNoise(nr)
	nr, err = runRollout(context.Background(), e.rc, nr, newView(testWriter{t}, false))
	if err != nil {
		t.Fatal(err)
	}
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("rollout %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	if len(nr.Status.Nodes) != 3 {
		t.Fatalf("%d nodes in status, want 3", len(nr.Status.Nodes))
	}
	for _, ns := range nr.Status.Nodes {
		t.Logf("%s: %s", ns.Name, ns.Verdict)
		if ns.Judgement == nil {
			t.Errorf("node %s was not judged", ns.Name)
			continue
		}
		var n, total int
		if _, err := fmt.Sscanf(ns.Judgement.Enrollment, "enrolled %d/%d", &n, &total); err != nil || n != total || (ns.Name == canary && total == 0) {
			t.Errorf("node %s: enrollment %q, want every ambient pod enrolled (some on the canary %s)", ns.Name, ns.Judgement.Enrollment, canary)
		}
		if !strings.Contains(strings.Join(ns.Detail, "; "), ns.Judgement.Enrollment) {
			t.Errorf("node %s: detail %q does not carry its enrollment count %q", ns.Name, ns.Detail, ns.Judgement.Enrollment)
		}
	}
}

// TestLiveNoReaddCNIBuildHaltsOnEnrollment: an istio-cni build that, once
// swapped in, does not re-add one pod (-noreadd: its redirection is gone)
// rolled onto the busiest node in place. The pod's traffic now goes
// straight to its peers and nothing fails, so the judge's traffic verdict on
// the node is Pass; the enrollment check halts the rollout at that canary,
// naming the pod and the redirection check.
func TestLiveNoReaddCNIBuildHaltsOnEnrollment(t *testing.T) {
	t.Parallel()
	cniFaultHaltsOnEnrollment(t, newLiveEnv(t, 3), "cni-noreadd", dataplane.TagNoReadd, wire.CheckRedirection)
}

// TestLiveBypassCNIBuildHaltsOnEnrollment: an istio-cni build that, once
// swapped in, re-adds one pod with its outbound capture unhooked (-bypass:
// every redirect rule is still in its namespace, so the redirection check
// passes) rolled onto the busiest node in place. The clients' streams live
// 3 to 4.5 s, so the pod's streams reopen in the 10 s soak, now straight to
// their peers; nothing fails, and the judge's traffic verdict is Pass. The
// bypass check halts the rollout at that canary, naming the pod.
func TestLiveBypassCNIBuildHaltsOnEnrollment(t *testing.T) {
	t.Parallel()
	traffic := liveTraffic
	traffic.StreamLife = 3 * time.Second
	cniFaultHaltsOnEnrollment(t, newLiveEnvTraffic(t, 3, traffic, testAgents(t)), "cni-bypass", dataplane.TagBypass, wire.CheckBypass)
}

// cniFaultHaltsOnEnrollment rolls the istio-cni build with the fault tag
// onto the busiest node of e in place, and wants it halted there: the
// node's first ambient app pod (the one the build re-adds wrong) was
// enrolled before the swap and is not after it on check, every other pod
// is, and the judge's traffic verdict alone was Pass.
func cniFaultHaltsOnEnrollment(t *testing.T, e *liveEnv, name, tag string, check wire.EnrollmentCheck) {
	t.Helper()
	ctx := context.Background()
	node := e.faultyBuild(cluster.CNIName, "1.27.5"+tag)
	apps, pods, err := ambientPodsOn(ctx, e.c, node)
	if err != nil || len(apps) < 2 {
		t.Fatalf("ambient app pods on %s: %v (%v), want at least two", node, apps, err)
	}
	wrong := apps[0] // the build re-adds the node's first ambient app pod wrong
	nr := faultyRollout(name, node, true)
	latencyAboveLoadNoise(nr) // the build is healthy for traffic: keep load noise out of its traffic verdict
	nr = e.run(nr, node)
	ns := nodeStatus(t, nr, node)
	t.Logf("halt reason: %s", nr.Status.HaltReason)
	t.Logf("verdict: %s", ns.Verdict)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node %s %s (verdict %q): want Halted at the canary %s", nr.Status.Phase, node, ns.State, ns.Verdict, node)
	}
	if want := fmt.Sprintf("pod %s was enrolled before the swap and is not after it: %s failed: ", wrong, check); !strings.Contains(nr.Status.HaltReason, want) {
		t.Errorf("halt reason %q: want %q (the pod re-added wrong, with the %s check)", nr.Status.HaltReason, want, check)
	}
	j := ns.Judgement
	if j == nil {
		t.Fatalf("node %s has no judgement", node)
	}
	if j.TrafficOutcome != v1alpha1.OutcomePass || j.Regressions != 0 {
		t.Errorf("the judge's traffic verdict: %q with %d regressions, want Pass (only enrollment should fail this build); verdict %q", j.TrafficOutcome, j.Regressions, ns.Verdict)
	}
	var n, total int
	if _, err := fmt.Sscanf(j.Enrollment, "enrolled %d/%d", &n, &total); err != nil || total != len(pods) || n != total-1 {
		t.Errorf("enrollment count %q: want %d of the node's %d ambient pods enrolled", j.Enrollment, len(pods)-1, len(pods))
	}
}

// TestLiveEnrollmentWatchdogFailsBeforeTheSoakEnds: a healthy build soaked
// 20 s under a 5 s enrollmentTimeout passes (the watchdog's checks find every
// pod enrolled again). The -nolisten ztunnel build is Ready, yet one pod's
// namespace has no HBONE listener: with a one-minute soak and the same
// bound, the soak's enrollment watchdog fails the node seconds into the
// soak, naming the pod and the listeners check, without waiting for the gate.
func TestLiveEnrollmentWatchdogFailsBeforeTheSoakEnds(t *testing.T) {
	e := newLiveEnv(t, 3)
	e.upgrade("1.28.1")
	e.settle()
	canary, err := busiestAmbientNode(context.Background(), e.c)
	if err != nil {
		t.Fatal(err)
	}
	healthy := judged(healthyRollout("watchdog-healthy", canary), 5*time.Second, 20*time.Second, v1alpha1.InconclusivePass)
	healthy.Spec.Drain.Policy = v1alpha1.DrainNever
	healthy.Spec.EnrollmentTimeout = &v1alpha1.Duration{Duration: 5 * time.Second}
	latencyAboveLoadNoise(healthy)
	healthy = e.run(healthy, canary)
	if hs := nodeStatus(t, healthy, canary); healthy.Status.Phase != v1alpha1.PhaseCompleted || !strings.HasPrefix(hs.Verdict, "Pass") {
		t.Fatalf("healthy build under the watchdog: rollout %s (%s), verdict %q", healthy.Status.Phase, healthy.Status.HaltReason, hs.Verdict)
	}

	node := e.faultyBuild(cluster.ZtunnelName, "1.27.4-nolisten")
	nr := faultyRollout("watchdog", node, true)
	nr.Spec.Soak = &v1alpha1.Duration{Duration: time.Minute}
	nr.Spec.EnrollmentTimeout = &v1alpha1.Duration{Duration: 5 * time.Second}
	nr = e.run(nr, node)
	ns := nodeStatus(t, nr, node)
	t.Logf("halt reason: %s", nr.Status.HaltReason)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node %s %s (verdict %q): want Halted at %s", nr.Status.Phase, node, ns.State, ns.Verdict, node)
	}
	if !strings.Contains(nr.Status.HaltReason, "enrollment watchdog: pod ") ||
		!strings.Contains(nr.Status.HaltReason, " was enrolled before the swap and is not now: listeners failed: nothing listens on 15008") {
		t.Errorf("halt reason %q: want the watchdog naming the pod that lost its HBONE listener, with the listeners check", nr.Status.HaltReason)
	}
	j := ns.Judgement
	if j == nil {
		t.Fatalf("node %s has no judgement", node)
	}
	t.Logf("failed %d s into the soak", j.SoakSeconds)
	if j.SoakSeconds < 5 || j.SoakSeconds >= 30 || j.Tests != 0 {
		t.Errorf("judgement %+v: want the node failed 5 to 30 s into its one-minute soak, before the gate's traffic tests", j)
	}
}

// ambientPodsOn is the namespace/name of every ambient pod on node, the
// app pods (not the probe's) apart, each sorted.
func ambientPodsOn(ctx context.Context, c *cluster.Cluster, node string) (apps, all []string, err error) {
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: "istio.io/dataplane-mode=ambient"})
	if err != nil {
		return nil, nil, err
	}
	for _, ns := range nss.Items {
		pods, err := c.Client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, nil, err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
				continue
			}
			all = append(all, p.Namespace+"/"+p.Name)
			if p.Labels[dataplane.ProbeLabel] != dataplane.ProbeName {
				apps = append(apps, p.Namespace+"/"+p.Name)
			}
		}
	}
	sort.Strings(apps)
	sort.Strings(all)
	return apps, all, nil
}

// TestLiveNoAddCNIBuildFailsAPodNewInTheSoak: an istio-cni build that enrols
// no new pod (-noadd) rolled onto the busiest node in place; every pod
// already there keeps its enrollment. A pod scheduled onto that node during
// its soak starts without redirection, and the gate at the soak's end fails
// the node naming that pod, new since the swap, and the redirection check.
func TestLiveNoAddCNIBuildFailsAPodNewInTheSoak(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 3)
	ctx := context.Background()
	node := e.faultyBuild(cluster.CNIName, "1.27.5"+dataplane.TagNoAdd)
	nr := faultyRollout("cni-noadd", node, true)
	nr.Spec.Soak = &v1alpha1.Duration{Duration: 30 * time.Second} // room to start a pod in it
	nr.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": node}}
	latencyAboveLoadNoise(nr)
	type result struct {
		nr  *v1alpha1.NodeRollout
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := runRollout(ctx, e.rc, nr, newView(testWriter{t}, false))
		done <- result{got, err}
	}()
	// Once the node soaks, a pod of the ambient namespace shop lands on it.
	var soaking bool
	for deadline := time.Now().Add(5 * time.Minute); !soaking && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		cur, err := e.rc.Get(ctx, nr.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		for _, ns := range cur.Status.Nodes {
			soaking = soaking || ns.Name == node && ns.State == v1alpha1.NodeSoak
		}
	}
	if !soaking {
		t.Fatalf("node %s never soaked", node)
	}
	late := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "late", Labels: map[string]string{"app": "late"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "late", Image: "docker.io/nodewise/sample-cart:1.0",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}
	if _, err := e.c.Client.CoreV1().Pods("shop").Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	ns := nodeStatus(t, res.nr, node)
	t.Logf("halt reason: %s", res.nr.Status.HaltReason)
	if res.nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node %s %s (verdict %q): want Halted at the canary %s", res.nr.Status.Phase, node, ns.State, ns.Verdict, node)
	}
	if want := "pod shop/late, new on the node since the swap, is not enrolled: redirection failed: "; !strings.Contains(res.nr.Status.HaltReason, want) {
		t.Errorf("halt reason %q: want %q", res.nr.Status.HaltReason, want)
	}
	if strings.Contains(res.nr.Status.HaltReason, "was enrolled before the swap") {
		t.Errorf("halt reason %q: a pod that was there before the swap lost its enrollment; -noadd keeps theirs", res.nr.Status.HaltReason)
	}
}
