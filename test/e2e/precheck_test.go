package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestPrecheckHoldsTheFirstNode: one node already failed to pull the
// rollout's new ztunnel image (a pod there waits in ErrImagePull). The
// rollout stays Pending before its first node, its Prechecked condition
// False naming that node and the image, nothing cordoned and no data-plane
// pod deleted. Once the template names an image that pulls and the failed
// pod is gone, the precheck passes and the rollout starts.
func TestPrecheckHoldsTheFirstNode(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e := newEnv(t, nodes, 1)
	ctx := context.Background()
	w := e.watch()
	e.upgrade("1.28.1")
	e.setImageTag(cluster.ZtunnelName, "1.28.1"+cluster.TagNoPull)
	ds, err := e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, cluster.ZtunnelName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	image := ds.Spec.Template.Spec.Containers[0].Image
	nl, err := e.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nl.Items) != nodes {
		t.Fatalf("nodes %v: %v", nl, err)
	}
	node := nl.Items[1].Name
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tried-the-new-ztunnel"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "z", Image: image}}},
	}
	if _, err := e.c.Client.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.c.Client.CoreV1().Pods("default").Get(ctx, probe.Name, metav1.GetOptions{})
		return err == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == "ErrImagePull", nil
	}); err != nil {
		t.Fatalf("the simulated kubelet did not report ErrImagePull for %s: %v", image, err)
	}

	e.runInProcess("solo")
	e.apply(rollout("held", nil))
	held := e.waitCondition("held", v1alpha1.ConditionPrechecked, metav1.ConditionFalse)
	c := meta.FindStatusCondition(held.Status.Conditions, v1alpha1.ConditionPrechecked)
	for _, want := range []string{"precheck found 1 error", "Error image-pull: node " + node + ": cannot pull " + image, "ErrImagePull"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Prechecked message %q lacks %q", c.Message, want)
		}
	}
	if held.Status.Phase != v1alpha1.PhasePending || held.Status.StartTime != nil || c.Reason != "PrecheckFailed" {
		t.Errorf("phase %s, start %v, reason %s: want Pending, not started, PrecheckFailed", held.Status.Phase, held.Status.StartTime, c.Reason)
	}
	// nodewise precheck says the same, one line, and exits 4.
	var out bytes.Buffer
	cmd := exec.Command(testkit.Binary(t, "nodewise"), "--kubeconfig="+e.c.Kubeconfig, "precheck")
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, append(os.Environ(), "PATH=/nonexistent") // no istioctl: its analyzers are another test's

	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 4 || !strings.Contains("\n"+out.String(), "\nError image-pull: node "+node+": cannot pull "+image+", which NodeRollout held's target istio-system/ztunnel needs: ErrImagePull") {
		t.Errorf("nodewise precheck: %v, printed:\n%s\nwant exit 4 and the node's image-pull error", err, out.String())
	}
	time.Sleep(2 * time.Second) // a pass a broken orchestrator would cordon in
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("nodes cordoned while held: %v", uns)
	}
	for _, n := range e.nodesWithStep() {
		t.Errorf("node %s has a step recorded while held", n)
	}
	w.mu.Lock()
	if len(w.deletes) != 0 {
		t.Errorf("data-plane pods deleted while held: %v", w.deletes)
	}
	w.mu.Unlock()

	e.setImageTag(cluster.ZtunnelName, "1.28.1")
	if err := e.c.Client.CoreV1().Pods("default").Delete(ctx, probe.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	started := e.waitCondition("held", v1alpha1.ConditionPrechecked, metav1.ConditionTrue)
	if started.Status.StartTime == nil {
		t.Errorf("Prechecked True but the rollout has not started (phase %s)", started.Status.Phase)
	}
}

// waitCondition waits (30 s) for rollout name's condition typ to have status.
func (e *env) waitCondition(name, typ string, status metav1.ConditionStatus) *v1alpha1.NodeRollout {
	e.t.Helper()
	var last *v1alpha1.NodeRollout
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		nr, err := e.rollouts.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = nr
		return meta.IsStatusConditionPresentAndEqual(nr.Status.Conditions, typ, status), nil
	})
	if err != nil {
		e.t.Fatalf("NodeRollout %s: condition %s not %s: phase %s, conditions %+v", name, typ, status, last.Status.Phase, last.Status.Conditions)
	}
	return last
}

// nodesWithStep are the nodes with a step recorded (a rollout started them).
func (e *env) nodesWithStep() []string {
	e.t.Helper()
	nl, err := e.c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, n := range nl.Items {
		if n.Annotations[model.AnnotationStep] != "" {
			out = append(out, n.Name)
		}
	}
	return out
}
