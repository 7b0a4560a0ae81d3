package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func createNamespace(t *testing.T, ctx context.Context, c kubernetes.Interface, name string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The service-account admission plugin refuses pods until the namespace's
	// default service account exists.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s never got its default service account: %v", name, err)
	}
}

// waitPods polls the pods matching selector until ok is true of the list.
func waitPods(t *testing.T, ctx context.Context, c kubernetes.Interface, ns, selector string, ok func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		pods = list.Items
		return ok(pods), nil
	})
	if err != nil {
		t.Fatalf("waiting for pods %q in %s: %v (last saw %d: %s)", selector, ns, err, len(pods), podStates(pods))
	}
	return pods
}

// podStates says, for each pod, its node, phase and each container's state
// and last termination (a crash's reason and exit code).
func podStates(pods []corev1.Pod) string {
	var out []string
	for _, p := range pods {
		s := fmt.Sprintf("%s on %q %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Waiting != nil:
				s += fmt.Sprintf(", %s waiting (%s: %s)", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
			case cs.State.Running != nil:
				s += fmt.Sprintf(", %s running", cs.Name)
			}
			if lt := cs.LastTerminationState.Terminated; lt != nil {
				s += fmt.Sprintf(", last ended %s exit %d: %q", lt.Reason, lt.ExitCode, lt.Message)
			}
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

func simpleDeployment(ns, name string, replicas int32, image string) *appsv1.Deployment {
	d := sampleDeployment(ns, name, replicas)
	d.Spec.Template.Spec.Containers[0].Image = image
	return d
}
