package orchestrator

import (
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/prepull"
)

// TestPrepullCreatesAndDeletesThePods: ActPrepull creates, in each target's
// namespace, one pod per target bound to the node with one container per new
// image of that target whose command does not exist, owned by the rollout
// and labelled with it and the target (what the chart's nodewise-prepull-only
// admits); ActPrepullDone deletes them at once. Both are idempotent (an
// existing or missing pod is fine); any other API error is returned.
func TestPrepullCreatesAndDeletesThePods(t *testing.T) {
	nr := rollout("r", func(nr *v1alpha1.NodeRollout) { nr.Spec.Prepull = true })
	p := model.MustPolicy(nr.Spec)
	name := prepull.Name("r", "n1", "ztunnel")
	forbidden := func(verb string) func(k8stesting.Action) (bool, runtime.Object, error) {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, name, errors.New("RBAC "+verb))
		}
	}

	secret := []corev1.LocalObjectReference{{Name: "istio-pull"}}
	cni := cniDS.DeepCopy()
	cni.Spec.Template.Spec.ImagePullSecrets = secret
	objs := cluster(fixture.OldHash, "n1")
	objs[0] = cni
	e := newEnv(t, objs...)
	if err := e.ex.apply.prepull(e.ctx, nr, p, planner.Action{Kind: planner.ActPrepull, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	for target, image := range map[string]string{"istio-cni-node": "docker.io/istio/install-cni:1.28.1", "ztunnel": "docker.io/istio/ztunnel:1.28.1"} {
		pod, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, prepull.Name("r", "n1", target), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeName != "n1" || pod.Labels[model.LabelPrepull] != "r" || pod.Labels[model.LabelPrepullTarget] != target || len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != nr.UID {
			t.Errorf("pod %+v, want bound to n1, labelled with r and %s, owned by r", pod.ObjectMeta, target)
		}
		var images []string
		for _, c := range pod.Spec.Containers {
			images = append(images, c.Image)
			if len(c.Command) != 1 || c.Command[0] != prepull.Command || c.SecurityContext != nil || len(c.VolumeMounts) != 0 {
				t.Errorf("container %s runs %v (securityContext %v, mounts %v), want %s alone", c.Name, c.Command, c.SecurityContext, c.VolumeMounts, prepull.Command)
			}
		}
		if !slices.Equal(images, []string{image}) {
			t.Errorf("%s's pod pulls %v, want its new image %s only", target, images, image)
		}
		s := pod.Spec
		if len(s.Tolerations) == 0 || s.RestartPolicy != corev1.RestartPolicyNever || s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || len(s.Volumes) != 0 || s.ServiceAccountName != "" {
			t.Errorf("pod spec %+v, want a daemon's tolerations, no restarts, no token, no volumes", s)
		}
		if wantSecrets := map[string][]corev1.LocalObjectReference{"istio-cni-node": secret}[target]; !slices.Equal(s.ImagePullSecrets, wantSecrets) {
			t.Errorf("%s's pod pulls with %v, want the template's %v", target, s.ImagePullSecrets, wantSecrets)
		}
	}
	// Again: it exists, which is fine.
	if err := e.ex.apply.prepull(e.ctx, nr, p, planner.Action{Kind: planner.ActPrepull, Node: "n1"}); err != nil {
		t.Errorf("second create: %v", err)
	}
	e.kube.PrependReactor("create", "pods", forbidden("create"))
	if err := e.ex.apply.prepull(e.ctx, nr, p, planner.Action{Kind: planner.ActPrepull, Node: "n2"}); !apierrors.IsForbidden(err) {
		t.Errorf("refused create: %v, want Forbidden", err)
	}

	done := planner.Action{Kind: planner.ActPrepullDone, Node: "n1"}
	if err := e.ex.apply.prepull(e.ctx, nr, p, done); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"istio-cni-node", "ztunnel"} {
		if _, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, prepull.Name("r", "n1", target), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s's pre-pull pod still there: %v", target, err)
		}
	}
	if err := e.ex.apply.prepull(e.ctx, nr, p, done); err != nil {
		t.Errorf("deleting a missing pod: %v", err)
	}
	e.kube.PrependReactor("delete", "pods", forbidden("delete"))
	if err := e.ex.apply.prepull(e.ctx, nr, p, done); !apierrors.IsForbidden(err) {
		t.Errorf("refused delete: %v, want Forbidden", err)
	}
}

// TestPrepullWithoutImages creates nothing: the targets are not in the
// cache, so there is no image to pull.
func TestPrepullWithoutImages(t *testing.T) {
	e := newEnv(t, testNode("n1"))
	nr := rollout("r", nil)
	if err := e.ex.apply.prepull(e.ctx, nr, model.MustPolicy(nr.Spec), planner.Action{Kind: planner.ActPrepull, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	for _, a := range e.kube.Actions() {
		if a.GetVerb() == "create" {
			t.Errorf("created %v with no image to pull", a)
		}
	}
}

// TestReconcilePrepullsBeforeStarting: with spec.prepull a due node gets its
// pre-pull pod first and does not start (no finalizer: nothing is held);
// once its images are pulled the pod is deleted and the node starts.
func TestReconcilePrepullsBeforeStarting(t *testing.T) {
	e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", func(nr *v1alpha1.NodeRollout) { nr.Spec.Prepull = true }))...)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for _, target := range []string{"istio-cni-node", "ztunnel"} {
		pod, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, prepull.Name("r", "n1", target), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("no pre-pull pod for %s: %v", target, err)
		}
		pods = append(pods, pod)
	}
	if e.ex.claims.Holds("r") || slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
		t.Error("the node started before its images were pulled")
	}
	if p := e.stored("r").Status.Phase; p != v1alpha1.PhaseProgressing {
		t.Errorf("phase %s, want Progressing", p)
	}
	// The kubelet pulled each image (the containers then fail to start).
	for _, pod := range pods {
		for range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "RunContainerError"}}})
		}
		_ = e.pods.Add(pod)
	}
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods {
		if _, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pre-pull pod %s not deleted before the start: %v", pod.Name, err)
		}
	}
	if !slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
		t.Error("the node did not start once pulled")
	}
}
