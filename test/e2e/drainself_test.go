package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/test/chart"
)

// TestDrainNeverEvictsNodewisePods installs the chart, then drains every node
// (policy always): the other pods on the nodes are evicted, nodewise's own
// orchestrator and revisions replicas are not (same pods, same UIDs), so a
// leader never evicts itself mid-soak.
func TestDrainNeverEvictsNodewisePods(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e := newEnv(t, nodes, 1)
	ctx := context.Background()
	objs, err := chart.Template(ctx, "createNamespace=true")
	if err != nil {
		t.Fatal(err)
	}
	if err := chart.Apply(ctx, e.c.Config, objs); err != nil {
		t.Fatal(err)
	}
	running := func(ns, selector string) map[string]string { // uid → node
		pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				out[string(p.UID)] = p.Spec.NodeName
			}
		}
		return out
	}
	own := "app.kubernetes.io/part-of=nodewise,app.kubernetes.io/name!=nodewise-agent"
	deadline := time.Now().Add(2 * time.Minute)
	for len(running(chart.Namespace, own)) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("nodewise's 4 controller replicas never ran: %v", running(chart.Namespace, own))
		}
		time.Sleep(200 * time.Millisecond)
	}
	before := running(chart.Namespace, own)
	e.pinApp("apps", "web", e.c.Nodes[0].Name)
	for len(running("apps", "app=web")) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the app pod never ran")
		}
		time.Sleep(200 * time.Millisecond)
	}
	app := running("apps", "app=web")

	// As deployed: the orchestrator's namespace (its Lease's) is the chart's.
	e.runInProcessWith("solo", func(c *orchestrator.Config) { c.Namespace = chart.Namespace })
	e.upgrade("1.28.1")
	e.apply(rollout("drain-self", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAlways, Timeout: &v1alpha1.Duration{Duration: 30 * time.Second}}
	}))
	nr := e.waitPhase("drain-self", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	after := running(chart.Namespace, own)
	for uid, node := range before {
		if _, ok := after[uid]; !ok {
			t.Errorf("nodewise pod %s on %s was evicted by the drain", uid, node)
		}
	}
	for uid := range app {
		if _, ok := running("apps", "app=web")[uid]; ok {
			t.Errorf("the app pod %s was not evicted: the drain did nothing, so this test shows nothing", uid)
		}
	}
}
