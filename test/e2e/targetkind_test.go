package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
)

// TestZtunnelTargetTypedByWhatItRuns: a ztunnel DaemonSet that is not named
// *ztunnel* (and has none of the chart's labels) is still a ztunnel target,
// told by its image, so drain policy auto drains a node whose pods it cannot
// vouch for (no agent: fail safe) instead of swapping it in place as if the
// swap reset nothing.
func TestZtunnelTargetTypedByWhatItRuns(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e := newEnv(t, nodes, 1)
	ctx := context.Background()
	zt, err := e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, cluster.ZtunnelName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"proxy": "l4"}
	l4 := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "l4-proxy", Namespace: ns, Labels: labels}, Spec: *zt.Spec.DeepCopy()}
	l4.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	l4.Spec.Template.Labels = map[string]string{"proxy": "l4", "istio.io/rev": zt.Spec.Template.Labels["istio.io/rev"]}
	if _, err := e.c.Client.AppsV1().DaemonSets(ns).Create(ctx, l4, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, "l4-proxy", metav1.GetOptions{})
		return err == nil && d.Status.NumberReady == nodes, nil
	}); err != nil {
		t.Fatalf("l4-proxy not Ready on every node: %v", err)
	}
	node := e.c.Nodes[0].Name
	e.pinApp("apps", "pinned", node)
	var pinned string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pl, err := e.c.Client.CoreV1().Pods("apps").List(ctx, metav1.ListOptions{})
		if err != nil || len(pl.Items) != 1 || !podutils.IsPodReady(&pl.Items[0]) {
			return false, nil
		}
		pinned = string(pl.Items[0].UID)
		return true, nil
	}); err != nil {
		t.Fatalf("pinned app not Ready: %v", err)
	}

	e.upgrade("1.28.1") // istiod first: the data plane is never newer
	zt, err = e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, cluster.ZtunnelName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l4, err = e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, "l4-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l4.Spec.Template.Labels["istio.io/rev"] = zt.Spec.Template.Labels["istio.io/rev"] // the new revision
	l4.Spec.Template.Spec.Containers = zt.Spec.Template.Spec.Containers               // ztunnel 1.28.1
	if _, err := e.c.Client.AppsV1().DaemonSets(ns).Update(ctx, l4, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.runInProcess("solo")
	e.apply(rollout("l4", func(s *v1alpha1.NodeRolloutSpec) {
		s.Targets = []v1alpha1.TargetRef{{Namespace: ns, Name: "l4-proxy"}}
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAuto, Timeout: &v1alpha1.Duration{Duration: time.Minute}}
	}))
	nr := e.waitPhase("l4", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted, v1alpha1.PhasePending)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s %s", nr.Status.Phase, nr.Status.HaltReason, conditionMessage(nr, "Valid"))
	}
	evs, err := e.c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=l4,reason=DrainDecision"})
	if err != nil {
		t.Fatal(err)
	}
	decided := ""
	for _, ev := range evs.Items {
		if strings.HasPrefix(ev.Message, "node "+node+":") {
			decided = ev.Message
		}
	}
	if !strings.Contains(decided, "drain (fail safe)") {
		t.Errorf("drain decision for %s: %q, want a fail-safe drain (the target is ztunnel)", node, decided)
	}
	pl, err := e.c.Client.CoreV1().Pods("apps").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pl.Items {
		if string(p.UID) == pinned && p.DeletionTimestamp == nil {
			t.Errorf("the pinned app pod was not evicted: node %s swapped in place", node)
		}
	}
}
