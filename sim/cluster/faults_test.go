package cluster

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// recordingRuntime refuses the first start of every pod (as a CNI plugin that
// is not ready would) and records the stop deadlines the kubelet gives.
type recordingRuntime struct {
	mu        sync.Mutex
	refused   map[string]bool
	started   map[string]string // pod name -> IP
	stopGrace map[string]time.Duration
}

func (r *recordingRuntime) Start(_ context.Context, pod *corev1.Pod, ip string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.refused[pod.Name] {
		r.refused[pod.Name] = true
		return errors.New("cni plugin not initialized")
	}
	r.started[pod.Name] = ip
	return nil
}

func (r *recordingRuntime) Stop(ctx context.Context, pod *corev1.Pod) {
	deadline, ok := ctx.Deadline()
	r.mu.Lock()
	if ok {
		r.stopGrace[pod.Name] = time.Until(deadline)
	}
	r.mu.Unlock()
	<-ctx.Done() // a process that ignores SIGTERM: killed when the grace period ends
}

// The simulated kubelet injects the faults tests rely on, retries a runtime
// that is not ready, and honours each pod's grace period.
func TestKubeletFaultsAndLifecycle(t *testing.T) {
	rt := &recordingRuntime{refused: map[string]bool{}, started: map[string]string{}, stopGrace: map[string]time.Duration{}}
	c := Start(t, Options{Nodes: 3, Runtime: rt})
	ctx := testContext(t, 3*time.Minute)
	createNamespace(t, ctx, c.Client, "faults")
	for name, image := range map[string]string{
		"healthy": "example/app:1.0", "stuck": "example/app:1.0" + TagNeverReady, "crashy": "example/app:1.0" + TagCrashLoop,
	} {
		if _, err := c.Client.AppsV1().Deployments("faults").Create(ctx, simpleDeployment("faults", name, 1, image), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	healthy := waitPods(t, ctx, c.Client, "faults", "app=healthy", func(p []corev1.Pod) bool { return len(p) == 1 && podutils.IsPodReady(&p[0]) })[0]
	rt.mu.Lock()
	ip := rt.started[healthy.Name]
	rt.mu.Unlock()
	if ip == "" || ip != healthy.Status.PodIP {
		t.Fatalf("runtime started %s with IP %q, API says %q", healthy.Name, ip, healthy.Status.PodIP)
	}

	crashy := waitPods(t, ctx, c.Client, "faults", "app=crashy", func(p []corev1.Pod) bool {
		return len(p) == 1 && len(p[0].Status.ContainerStatuses) == 1 && p[0].Status.ContainerStatuses[0].RestartCount >= 2
	})[0]
	if cs := crashy.Status.ContainerStatuses[0]; cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || podutils.IsPodReady(&crashy) {
		t.Errorf("crash-looping pod: state %+v ready %t", cs.State, podutils.IsPodReady(&crashy))
	}
	// By the time the crash loop restarted twice (≥ 3 s), the never-ready pod
	// has long been Running, and it is still not Ready.
	stuck := waitPods(t, ctx, c.Client, "faults", "app=stuck", func(p []corev1.Pod) bool {
		return len(p) == 1 && p[0].Status.Phase == corev1.PodRunning
	})[0]
	if podutils.IsPodReady(&stuck) || stuck.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("never-ready pod: ready %t restarts %d", podutils.IsPodReady(&stuck), stuck.Status.ContainerStatuses[0].RestartCount)
	}

	// NotReady and back; a condition another writer set (a lifecycle
	// condition) stays through both reports, as the kubelet keeps it.
	node := c.Nodes[1].Name
	theirs := `{"status":{"conditions":[{"type":"MaintenanceInProgress","status":"True","reason":"FirmwareUpdate"}]}}`
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(theirs), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := SetNodeReady(ctx, c.Client, node, false); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, ctx, c, node, corev1.ConditionFalse)
	if err := SetNodeReady(ctx, c.Client, node, true); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, ctx, c, node, corev1.ConditionTrue)
	if n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil || !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeMaintenanceInProgress && c.Reason == "FirmwareUpdate"
	}) {
		t.Errorf("after the kubelet's reports node %s lost another writer's condition: %v", node, err)
	}

	// Deletion: the runtime gets the pod's grace period as its deadline, and
	// the pod is gone once it ends.
	grace := int64(3)
	if err := c.Client.CoreV1().Pods("faults").Delete(ctx, healthy.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods("faults").Get(ctx, healthy.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("deleted pod never went away: %v", err)
	}
	rt.mu.Lock()
	got := rt.stopGrace[healthy.Name]
	rt.mu.Unlock()
	if got < 2*time.Second || got > 3*time.Second {
		t.Fatalf("runtime was given %v to stop the pod, want its 3 s grace period", got)
	}
}

func waitNodeReady(t *testing.T, ctx context.Context, c *Cluster, node string, want corev1.ConditionStatus) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == want, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("node %s never became Ready=%s: %v", node, want, err)
	}
}
