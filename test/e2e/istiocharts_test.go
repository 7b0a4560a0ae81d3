package e2e

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// chartDaemonSets renders Istio's ambient profile with the built istioctl
// at an image tag and returns its DaemonSets (ztunnel and istio-cni-node),
// switched to OnDelete as nodewise requires.
func chartDaemonSets(t *testing.T, tag string) map[string]*appsv1.DaemonSet {
	t.Helper()
	dss := map[string]*appsv1.DaemonSet{}
	for _, u := range testkit.IstioManifest(t, "--set", "profile=ambient", "--set", "tag="+tag) {
		if u.GetKind() != "DaemonSet" {
			continue
		}
		ds := &appsv1.DaemonSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ds); err != nil {
			t.Fatal(err)
		}
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
		dss[ds.Name] = ds
	}
	for _, name := range []string{cluster.ZtunnelName, cluster.CNIName} {
		if dss[name] == nil || dss[name].Namespace != ns {
			t.Fatalf("the ambient profile rendered no DaemonSet %s/%s (got %d DaemonSets)", ns, name, len(dss))
		}
	}
	return dss
}

// TestRollIstioChartDaemonSets: the ztunnel and istio-cni DaemonSets of
// Istio's own charts (istioctl manifest generate --set profile=ambient), with
// their resource requests (Burstable pods) and their istio-ca-root-cert
// mount, run on the simulated cluster, and a NodeRollout rolls them from one
// rendered release to the next, to completion.
func TestRollIstioChartDaemonSets(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e := newEnv(t, nodes, 1)
	ctx := context.Background()
	if _, err := e.c.Client.CoreV1().ConfigMaps(ns).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{}); err != nil {
		t.Fatalf("the fixtures' istiod published no istio-ca-root-cert in %s: %v", ns, err)
	}
	// Replace the fixtures' DaemonSets with the charts'.
	for _, name := range []string{cluster.ZtunnelName, cluster.CNIName} {
		fg := metav1.DeletePropagationForeground
		if err := e.c.Client.AppsV1().DaemonSets(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := e.c.Client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		t.Fatalf("fixture DaemonSets not gone: %v", err)
	}
	for _, ds := range chartDaemonSets(t, "1.27.3") {
		if _, err := e.c.Client.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the chart's DaemonSet %s: %v", ds.Name, err)
		}
	}
	e.waitDaemonSetsReady(nodes)

	// The next release: the charts' templates move, OnDelete, as helm upgrade would.
	for _, next := range chartDaemonSets(t, "1.27.4") {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, next.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec.Template = next.Spec.Template
			_, err = e.c.Client.AppsV1().DaemonSets(ns).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	w := e.watch()
	e.runInProcess("solo")
	e.apply(rollout("charts", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	}))
	nr := e.waitPhase("charts", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted, v1alpha1.PhasePending)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || nr.Status.Counts.Done != nodes {
		t.Fatalf("phase %s counts %+v: %s %s", nr.Status.Phase, nr.Status.Counts, nr.Status.HaltReason, conditionMessage(nr, "Valid"))
	}
	e.assertAllOnNewest(nodes)
	time.Sleep(500 * time.Millisecond) // let the watcher drain its channel
	if got, worst := w.max(); got > 1 {
		t.Errorf("%d nodes unavailable at once (> maxUnavailable 1): %s", got, worst)
	}
}
